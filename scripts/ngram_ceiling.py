"""How much of a masked token the neighbours give away, by counting (no model).

Held-out cross-entropy (nats) of a middle token of the shipped corpus under
  - its unigram frequency (what `unigram_mlm_loss` reports),
  - its left neighbour (bigram counts interpolated with the unigram),
  - both neighbours (trigram-style counts interpolated with the two bigrams),
tokenised by a run's tokenizer and held out as the corpus' last 2% of tokens. A model that
learned only from the two adjacent tokens reaches the last figure; `docs/history/performance.md` uses it
to show how far the main job's models are from what the text offers.

    python scripts/ngram_ceiling.py runs/bert/tokenizer
"""
import collections
import math
import sys

from transformers import AutoTokenizer


def interpolate(counts, token, weight, base):
    total = sum(counts.values())
    if total == 0:
        return base
    lam = total / (total + weight)
    return lam * counts[token] / total + (1 - lam) * base


def main(tokenizer_dir, corpus="data/moby-dick.txt"):
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    ids = []
    for doc in open(corpus, encoding="utf-8").read().split("\n\n"):
        ids += tok(doc.replace("\n", " "), add_special_tokens=False).input_ids
    split = int(len(ids) * 0.98)
    train, held = ids[:split], ids[split:]
    vocab = len(tok)
    unigram = collections.Counter(train)
    p_unigram = lambda w: (unigram[w] + 1) / (len(train) + vocab)
    left, right, both = (collections.defaultdict(collections.Counter) for _ in range(3))
    for i in range(1, len(train) - 1):
        left[train[i - 1]][train[i]] += 1
        right[train[i + 1]][train[i]] += 1
        both[(train[i - 1], train[i + 1])][train[i]] += 1
    nll = collections.Counter()
    n = 0
    for i in range(1, len(held) - 1):
        w = held[i]
        base = p_unigram(w)
        p_left = interpolate(left[held[i - 1]], w, 25, base)
        p_right = interpolate(right[held[i + 1]], w, 25, base)
        p_both = interpolate(both[(held[i - 1], held[i + 1])], w, 5, (p_left + p_right) / 2)
        nll["unigram"] -= math.log(base)
        nll["left neighbour"] -= math.log(p_left)
        nll["both neighbours"] -= math.log(p_both)
        n += 1
    for name, total in nll.items():
        print(f"{name}: {total / n:.3f} nats ({n} held-out tokens, {len(train)} training tokens)")


if __name__ == "__main__":
    main(*sys.argv[1:])
