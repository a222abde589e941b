#!/usr/bin/env python3
"""sentence-transformers' side of `cargo xtask bench --mode finetune-embed --compare-pytorch`.

Trains a sentence-embedding model with `SentenceTransformerTrainer` as `cargo xtask finetune
--task embed` does by default on (anchor, positive[, negative...]) rows:
MultipleNegativesRankingLoss (scale 20), NO_DUPLICATES batches, texts truncated to --seq-len
tokens, AdamW (weight decay 0), linear decay from --lr without warm-up, gradient-norm clipping
at 1.0, an evaluation at the end of every epoch, --epochs. The held-out file is scored by
`InformationRetrievalEvaluator` built as Sesame builds it (each distinct anchor a query, every
distinct positive and negative the corpus, an anchor's positives relevant). With
--sesame-model, Sesame's export is scored by the same evaluator, so that both sides' quality is
measured by one implementation.

Prints one JSON object: the training time (`train_runtime`, evaluations included, as Sesame's
`train_seconds`), one evaluation's time (`eval_runtime`), the steps, the threads, and the
held-out metrics of both models.

Pinned versions: scripts/requirements-fixtures.txt (torch, transformers,
sentence-transformers) and scripts/requirements-embed-bench.txt (`datasets`, which the trainer
needs; installed apart: pip install --target DIR -r that file; PYTHONPATH=DIR). CPU only.
"""

import argparse
import csv
import json
import sys
import tempfile
import time


def read_rows(path):
    """The text columns of a CSV, TSV or JSON-lines file, in order (a `label` or `score`
    column left out), as sentence-transformers' datasets take them."""
    if path.endswith(".jsonl") or path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        names = list(rows[0].keys())
        table = {n: [r[n] for r in rows] for n in names}
    else:
        delimiter = "\t" if path.endswith(".tsv") or path.endswith(".tab") else ","
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f, delimiter=delimiter)
            rows = list(reader)
            names = reader.fieldnames
        table = {n: [r[n] for r in rows] for n in names}
    return {n: v for n, v in table.items() if n not in ("label", "score")}


def evaluator_of(table):
    from sentence_transformers.evaluation import InformationRetrievalEvaluator

    columns = list(table.values())
    queries, corpus, relevant = {}, {}, {}
    query_ids, doc_ids = {}, {}
    for row in zip(*columns):
        q = query_ids.setdefault(row[0], f"q{len(query_ids)}")
        queries[q] = row[0]
        for text in row[1:]:
            d = doc_ids.setdefault(text, f"d{len(doc_ids)}")
            corpus[d] = text
        relevant.setdefault(q, set()).add(doc_ids[row[1]])
    return InformationRetrievalEvaluator(queries, corpus, relevant, name="held-out", show_progress_bar=False)


def scores(evaluator, model):
    found = evaluator(model)
    prefix = "held-out_"
    return {k[len(prefix):]: v for k, v in found.items() if k.startswith(prefix)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--eval", required=True)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--sesame-model", help="Sesame's export, scored by the same evaluator")
    args = p.parse_args()
    try:
        import datasets
    except ImportError:
        sys.exit("embed_trainer.py needs `datasets` (scripts/requirements-embed-bench.txt): pip install --target DIR -r scripts/requirements-embed-bench.txt; PYTHONPATH=DIR")
    import torch
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.training_args import BatchSamplers

    import pyarrow

    # A fixed fingerprint: datasets' own hashes the Arrow table with dill, which fails on this
    # pyarrow's types, and nothing is cached here anyway.
    train = datasets.Dataset(pyarrow.table(read_rows(args.train)), fingerprint="embed-trainer-train")
    evaluator = evaluator_of(read_rows(args.eval))
    model = SentenceTransformer(args.model, device="cpu")
    model.max_seq_length = args.seq_len
    with tempfile.TemporaryDirectory() as out:
        training = SentenceTransformerTrainingArguments(
            output_dir=out,
            num_train_epochs=args.epochs,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.lr,
            weight_decay=0.0,
            warmup_steps=0,
            lr_scheduler_type="linear",
            max_grad_norm=1.0,
            seed=args.seed,
            batch_sampler=BatchSamplers.NO_DUPLICATES,
            eval_strategy="epoch",
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=True,
            dataloader_drop_last=False,
            disable_tqdm=True,
        )
        trainer = SentenceTransformerTrainer(model=model, args=training, train_dataset=train, loss=MultipleNegativesRankingLoss(model), evaluator=evaluator)
        result = trainer.train()
    started = time.perf_counter()
    metrics = scores(evaluator, model)
    eval_runtime = time.perf_counter() - started
    out = {
        "train_runtime": result.metrics["train_runtime"],
        "eval_runtime": eval_runtime,
        "steps": result.global_step,
        "threads": torch.get_num_threads(),
        "metrics": metrics,
    }
    if args.sesame_model:
        out["sesame_metrics"] = scores(evaluator, SentenceTransformer(args.sesame_model, device="cpu"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
