#!/usr/bin/env python3
"""transformers' side of `cargo xtask bench --mode finetune --compare-pytorch`.

Fine-tunes a sequence classifier with transformers' `Trainer` exactly as `cargo xtask finetune
--task classify` does by default: the same CSV columns, classes sorted by name (numerically for
integers), texts truncated to --seq-len tokens, batches padded to their longest row, AdamW
(weight decay 0), linear decay from --lr without warm-up, global gradient-norm clipping at 1.0,
an evaluation at the end of every epoch, --epochs or --steps. Prints one JSON object: the
training time (`train_runtime`, evaluations during training included, as Sesame's
`train_seconds`), the time of one evaluation (`eval_runtime`), the steps, and the final
held-out accuracy, F1 macro, MCC and loss.

Pinned versions: scripts/requirements-fixtures.txt (torch 2.9.0, transformers 5.23,
accelerate 1.15, scikit-learn 1.9.1). CPU only; torch uses every core, as Sesame does.
"""

import argparse
import csv
import json
import sys
import tempfile

import numpy as np
import torch
import transformers
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef


def read_rows(path, text_column, label_column):
    delimiter = "\t" if path.endswith(".tsv") else ","
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter=delimiter))
    return [r[text_column] for r in rows], [r[label_column] for r in rows]


def class_names(labels):
    names = sorted(set(labels))
    try:
        return sorted(names, key=int)
    except ValueError:
        return names


class Rows(torch.utils.data.Dataset):
    def __init__(self, encodings, labels):
        self.encodings, self.labels = encodings, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        item = {k: v[i] for k, v in self.encodings.items()}
        item["labels"] = self.labels[i]
        return item


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--eval", required=True)
    p.add_argument("--text-column", default="text")
    p.add_argument("--label-column", default="label")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--steps", type=int, default=-1)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()

    train_texts, train_labels = read_rows(args.train, args.text_column, args.label_column)
    eval_texts, eval_labels = read_rows(args.eval, args.text_column, args.label_column)
    names = class_names(train_labels)
    ids = {n: i for i, n in enumerate(names)}
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    transformers.set_seed(args.seed)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        args.model, num_labels=len(names), id2label=dict(enumerate(names)), label2id=ids
    )
    encode = lambda texts: tokenizer(texts, truncation=True, max_length=args.seq_len)
    train = Rows(encode(train_texts), [ids[l] for l in train_labels])
    held_out = Rows(encode(eval_texts), [ids[l] for l in eval_labels])

    def metrics(prediction):
        predicted = np.argmax(prediction.predictions, axis=-1)
        truth = prediction.label_ids
        return {
            "accuracy": accuracy_score(truth, predicted),
            "f1_macro": f1_score(truth, predicted, average="macro"),
            "mcc": matthews_corrcoef(truth, predicted),
        }

    with tempfile.TemporaryDirectory() as out:
        training = transformers.TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=args.batch_size,
            learning_rate=args.lr,
            num_train_epochs=args.epochs,
            max_steps=args.steps,
            lr_scheduler_type="linear",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            seed=args.seed,
            # An evaluation at the end of every epoch, or at the last step, as Sesame's.
            eval_strategy="epoch" if args.steps < 0 else "steps",
            eval_steps=None if args.steps < 0 else args.steps,
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=True,
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        trainer = transformers.Trainer(
            model=model,
            args=training,
            train_dataset=train,
            eval_dataset=held_out,
            data_collator=transformers.DataCollatorWithPadding(tokenizer),
            compute_metrics=metrics,
        )
        result = trainer.train()
        final = trainer.evaluate()
    print(
        json.dumps(
            {
                "train_runtime": result.metrics["train_runtime"],
                # The evaluation at the end of training, timed again alone (train_runtime holds one).
                "eval_runtime": final["eval_runtime"],
                "steps": result.global_step,
                "threads": torch.get_num_threads(),
                "metrics": {k.removeprefix("eval_"): final[f"eval_{k}"] for k in ["accuracy", "f1_macro", "mcc", "loss"]},
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
