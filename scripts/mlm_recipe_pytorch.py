"""The main job's recipe in PyTorch/transformers, as a check on Sesame's training.

Trains a fresh `BertForMaskedLM` of a run's config on the shipped corpus (random 64-token
windows, 15% of tokens as targets, 80/10/10, AdamW with linear warm-up and decay, gradient
clipping 1.0) and prints, every `--every` steps, the training loss and the held-out loss with
every target shown as [MASK] next to the unigram baseline of the same targets. Held out: the
corpus' last 2% of tokens. MLM only (no NSP). Used in docs/history/performance.md to show that
transformers' BERT with the same recipe stays at the unigram plateau too.

    python scripts/mlm_recipe_pytorch.py runs/bert/export --lr 2e-3
"""
import argparse
import random
import time

import torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

ap = argparse.ArgumentParser()
ap.add_argument("run_export", help="a run's export/ directory (config.json + tokenizer)")
ap.add_argument("--steps", type=int, default=1400)
ap.add_argument("--lr", type=float, default=2e-3)
ap.add_argument("--batch-size", type=int, default=32)
ap.add_argument("--dropout", type=float, default=0.1)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--every", type=int, default=200)
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()
torch.manual_seed(args.seed)
rng = random.Random(args.seed)
torch.set_num_threads(args.threads)

tok = BertTokenizerFast.from_pretrained(args.run_export)
cfg = BertConfig.from_pretrained(args.run_export)
cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = args.dropout
model = BertForMaskedLM(cfg)

ids = []
for doc in open("data/moby-dick.txt", encoding="utf-8").read().split("\n\n"):
    ids += tok(doc.replace("\n", " "), add_special_tokens=False).input_ids
split = int(len(ids) * 0.98)
train, held = ids[:split], ids[split:]
window = cfg.max_position_embeddings - 2
counts = torch.ones(cfg.vocab_size)
for t in train:
    counts[t] += 1
unigram_nll = -(counts / counts.sum()).log()


def window_at(seq, i):
    return torch.tensor([tok.cls_token_id] + seq[i : i + window] + [tok.sep_token_id])


def masked(x, g, mask_fraction, random_fraction):
    labels, inputs = torch.full_like(x, -100), x.clone()
    for i in range(1, len(x) - 1):
        if g.random() < 0.15:
            labels[i] = x[i]
            r = g.random()
            if r < mask_fraction:
                inputs[i] = tok.mask_token_id
            elif r < mask_fraction + random_fraction:
                inputs[i] = g.randrange(5, cfg.vocab_size)
    return inputs, labels


g_held = random.Random(1)
held_batches = [masked(window_at(held, i), g_held, 1.0, 0.0) for i in range(0, len(held) - window, window)]
held_inputs = torch.stack([b[0] for b in held_batches])
held_labels = torch.stack([b[1] for b in held_batches])


def evaluate():
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=held_inputs).logits
        sel = held_labels != -100
        loss = torch.nn.functional.cross_entropy(logits[sel], held_labels[sel]).item()
    model.train()
    return loss, unigram_nll[held_labels[held_labels != -100]].mean().item()


warmup = args.steps // 10
opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, eps=1e-6)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / warmup if s < warmup else max(0.0, (args.steps - s) / (args.steps - warmup)))
start = time.time()
for step in range(1, args.steps + 1):
    batch = [masked(window_at(train, rng.randrange(0, len(train) - window)), rng, 0.8, 0.1) for _ in range(args.batch_size)]
    loss = model(input_ids=torch.stack([b[0] for b in batch]), labels=torch.stack([b[1] for b in batch])).loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    if step % args.every == 0:
        held_loss, baseline = evaluate()
        print(f"step {step}: train loss {loss.item():.3f}, held-out MLM loss {held_loss:.3f}, unigram baseline {baseline:.3f} ({time.time() - start:.0f} s)", flush=True)
