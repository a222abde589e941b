"""ELECTRA's pre-training recipe in PyTorch/transformers, beside `cargo xtask train electra`.

Trains transformers' `ElectraForMaskedLM` (the generator) and `ElectraForPreTraining` (the
discriminator) from fresh weights, sharing one embeddings module (the discriminator's; the
generator's decoder is their word table), with the loss `MLM + 50 RTD`, on the data a Sesame
run trains on:

- the corpus split into documents at blank lines and into sentences, its last 2% of
  documents held out;
- single sequences packed with full sentences (`[CLS] doc1 [SEP] doc2 [SEP]`), sentences
  longer than a sequence cut into pieces;
- ELECTRA's masking: 15% of the tokens (round(n * 0.15), at least 1), 85% of them `[MASK]`,
  15% kept, drawn anew per batch; the generator's samples (softmax at `--temperature`, not
  back-propagated through) replace every chosen token; a sample equal to the original is
  labelled original;
- AdamW (0.9, 0.999, eps 1e-6, weight decay on matrices and embeddings only), gradient-norm
  clip 1.0, linear warm-up over 10% of the steps and linear decay to 0.

The model shapes and the tokenizer are a Sesame run's (`RUN/export` and `RUN/export/generator`),
so the two implementations train the same models on the same text. Every `--every` steps it
prints the held-out metrics, every target `[MASK]`ed as Sesame's held-out batches do: the
generator's MLM loss, and the discriminator's RTD loss, accuracy, precision, recall and AUC,
beside the prior's (the entropy of the replaced fraction, and the accuracy of calling every
token original). Used in docs/models/electra.md.

    python scripts/electra_recipe_pytorch.py runs/electra/export --steps 4000
"""
import argparse
import json
import math
import random
import re
import time

import torch
from tokenizers import Tokenizer
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

ap = argparse.ArgumentParser()
ap.add_argument("export", help="a Sesame ELECTRA run's export/ (config.json, generator/, tokenizer.json)")
ap.add_argument("--corpus", default="data/moby-dick.txt")
ap.add_argument("--steps", type=int, default=4000)
ap.add_argument("--seq-len", type=int, default=16)
ap.add_argument("--batch-size", type=int, default=128, help="sequences a step (Sesame: 4 micro-batches of 32)")
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--rtd-weight", type=float, default=50.0)
ap.add_argument("--temperature", type=float, default=1.0, help="the generator's sampling temperature")
ap.add_argument("--mask-prob", type=float, default=0.15)
ap.add_argument("--every", type=int, default=250)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--jsonl", help="also write each evaluation as a JSON line here")
args = ap.parse_args()
torch.manual_seed(args.seed)
rng = random.Random(args.seed)
torch.set_num_threads(args.threads)

tok = Tokenizer.from_file(f"{args.export}/tokenizer.json")
disc_cfg = ElectraConfig.from_pretrained(args.export)
gen_cfg = ElectraConfig.from_pretrained(f"{args.export}/generator")
for c in (disc_cfg, gen_cfg):
    c.max_position_embeddings = max(c.max_position_embeddings, args.seq_len)
CLS, SEP, MASK, PAD = (tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[MASK]", "[PAD]"))


def sentences(paragraph):
    # Sesame's split_sentences: after . ! ? (and closing quotes) before a space and a word
    # that is not lower-case, unless the word is an abbreviation or a single initial.
    out, start = [], 0
    for m in re.finditer(r"[.!?][.!?\"')\]\u201d\u2019]*(?=\s|$)", paragraph):
        word = paragraph[start:m.start()].split()[-1:] or [""]
        word = word[0].lstrip("(\"'\u201c").lower()
        rest = paragraph[m.end():].lstrip()
        if rest[:1].islower() or (m.group()[0] == "." and (word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()))):
            continue
        out.append(paragraph[start:m.end()].strip())
        start = m.end()
    if paragraph[start:].strip():
        out.append(paragraph[start:].strip())
    return [s for s in out if s]


ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no", "vol", "fig", "mt"}
documents, current = [], []
for line in open(args.corpus, encoding="utf-8").read().splitlines() + [""]:
    if line.strip():
        current.append(line.strip())
    elif current:
        documents.append(sentences(" ".join(current)))
        current = []
held = max(1, round(len(documents) * 0.02))
train_docs, held_docs = documents[:-held], documents[-held:]


def pack(docs):
    """Sesame's pack_sentences with FullSentences: rows of at most seq_len tokens."""
    piece = args.seq_len - 2
    rows, current = [], []  # current: list of segments (lists of ids)
    length = lambda segs: 1 + sum(len(s) + 1 for s in segs)
    for doc in docs:
        new_doc = True
        for sentence in doc:
            ids = tok.encode(sentence, add_special_tokens=False).ids
            for i in range(0, len(ids), piece):
                chunk = ids[i:i + piece]
                cost = len(chunk) + (1 if new_doc or not current else 0)
                if current and length(current) + cost > args.seq_len:
                    rows.append(current)
                    current = []
                if new_doc or not current:
                    current.append([])
                    new_doc = False
                current[-1].extend(chunk)
    if current:
        rows.append(current)
    return [[CLS] + [t for s in segs for t in s + [SEP]] for segs in rows]


train_rows, held_rows = pack(train_docs), pack(held_docs)
print(f"{len(documents)} documents ({held} held out), {len(train_rows)} training rows, {len(held_rows)} held-out rows")


def mask_batch(rows, r, all_mask):
    n = len(rows)
    ids = torch.full((n, args.seq_len), PAD)
    attention = torch.zeros((n, args.seq_len), dtype=torch.long)
    labels = torch.full((n, args.seq_len), -100)
    for b, row in enumerate(rows):
        ids[b, :len(row)] = torch.tensor(row)
        attention[b, :len(row)] = 1
        candidates = [i for i, t in enumerate(row) if t not in (CLS, SEP, PAD)]
        budget = max(1, round(len(candidates) * args.mask_prob)) if candidates else 0
        for i in r.sample(candidates, budget):
            labels[b, i] = row[i]
            if all_mask or r.random() < 0.85:
                ids[b, i] = MASK
    return ids, attention, labels


disc = ElectraForPreTraining(disc_cfg)
gen = ElectraForMaskedLM(gen_cfg)
gen.electra.embeddings = disc.electra.embeddings
gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
params = {id(p): (n, p) for n, p in list(disc.named_parameters()) + list(gen.named_parameters())}.values()
no_decay = lambda n: n.endswith("bias") or "LayerNorm" in n
opt = torch.optim.AdamW([{"params": [p for n, p in params if not no_decay(n)], "weight_decay": 0.01},
                         {"params": [p for n, p in params if no_decay(n)], "weight_decay": 0.0}],
                        lr=args.lr, betas=(0.9, 0.999), eps=1e-6)
warmup = args.steps // 10
schedule = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: s / max(1, warmup) if s < warmup else max(0.0, (args.steps - s) / max(1, args.steps - warmup)))
all_params = [p for _, p in params]


def joint(ids, attention, labels, g=None):
    out = gen(input_ids=ids, attention_mask=attention, labels=labels)
    chosen = labels != -100
    logits = out.logits[chosen].detach() / args.temperature
    u = torch.rand(logits.shape, generator=g).clamp_min(1e-9)
    samples = (logits - torch.log(-torch.log(u))).argmax(-1)
    original = torch.where(chosen, labels, ids)
    corrupted = original.clone()
    corrupted[chosen] = samples
    replaced = (corrupted != original).long()
    d = disc(input_ids=corrupted, attention_mask=attention, labels=replaced)
    return out.loss, d.loss, d.logits, replaced


def auc(scores, labels):
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    pos = sum(labels)
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return (sum(r for r, l in zip(ranks, labels) if l) - pos * (pos + 1) / 2) / (pos * neg)


def evaluate(step):
    disc.eval(), gen.eval()
    g = torch.Generator().manual_seed(1234)
    r = random.Random(1234)
    mlm, n_masked, scores, truth = 0.0, 0, [], []
    with torch.no_grad():
        for i in range(0, len(held_rows), 64):
            ids, attention, labels = mask_batch(held_rows[i:i + 64], r, all_mask=True)
            mlm_loss, _, logits, replaced = joint(ids, attention, labels, g)
            k = int((labels != -100).sum())
            mlm, n_masked = mlm + mlm_loss.item() * k, n_masked + k
            keep = attention.bool()
            scores += logits[keep].tolist()
            truth += replaced[keep].tolist()
    disc.train(), gen.train()
    n, pos = len(truth), sum(truth)
    prior = pos / n
    said = [s > 0 for s in scores]
    tp = sum(1 for s, t in zip(said, truth) if s and t)
    rtd = sum(math.log1p(math.exp(-abs(s))) + max(s, 0) - s * t for s, t in zip(scores, truth)) / n
    row = dict(step=step, mlm_loss=mlm / n_masked, rtd_loss=rtd,
               prior_entropy=-(prior * math.log(prior) + (1 - prior) * math.log(1 - prior)),
               rtd_accuracy=sum(1 for s, t in zip(said, truth) if s == bool(t)) / n, prior_accuracy=1 - prior,
               rtd_precision=tp / max(1, sum(said)), rtd_recall=tp / max(1, pos), rtd_auc=auc(scores, truth),
               replaced_fraction=prior)
    print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    if args.jsonl:
        with open(args.jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")


order, epoch_pos = [], 0
start = time.time()
for step in range(1, args.steps + 1):
    if epoch_pos + args.batch_size > len(order):
        order = list(range(len(train_rows)))
        rng.shuffle(order)
        epoch_pos = 0
    rows = [train_rows[i] for i in order[epoch_pos:epoch_pos + args.batch_size]]
    epoch_pos += args.batch_size
    ids, attention, labels = mask_batch(rows, rng, all_mask=False)
    mlm_loss, rtd_loss, _, _ = joint(ids, attention, labels)
    loss = mlm_loss + args.rtd_weight * rtd_loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(all_params, 1.0)
    opt.step()
    schedule.step()
    if step % args.every == 0 or step == args.steps:
        print(f"[{time.time() - start:.0f} s] train mlm {mlm_loss.item():.4f} rtd {rtd_loss.item():.4f}", flush=True)
        evaluate(step)
