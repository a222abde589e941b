#!/usr/bin/env python3
"""The PyTorch / transformers side of `cargo xtask bench --compare-pytorch`.

Runs the same work as Sesame's benchmark, on the same machine, with the pinned venv of
scripts/setup-python.sh (torch 2.9.0, transformers 5.23, sentence-transformers 6.2), and
prints one JSON object on stdout:

  pretrain  --config DIR   training steps (forward with labels, backward, AdamW) of the
                           architecture DIR/config.json names, fresh weights; batch of the same
                           synthetic ids and labels as Sesame's (every seventh token predicted;
                           XLNet: the permutation batch in DIR/batch.safetensors, with memory)
  infer     --config DIR   forward passes of the base model (with its pooler), inference mode
  embed     --model DIR    sentence-transformers `encode` of the sentences in --sentences
                           (one per line), model loading timed apart
  gemm                     an [m, k] by [k, n] f32 matrix product (--gemm-shape MxKxN, or the
                           square of --gemm-size), GFLOP/s: PyTorch's (MKL on x86), and
                           OpenBLAS's through NumPy (the BLAS its wheels ship), both with
                           torch's thread count
  generate  --config DIR   `generate` of DIR's architecture and weights (BART, XLNet) on the
                           synthetic sources or prompts, exactly --max-new-tokens tokens (min = max),
                           greedy or --num-beams; tokens/s and the process's peak RSS. A UniLM
                           (BertForMaskedLM) runs microsoft/unilm's sequence-to-sequence decoding
                           loop instead (`unilm_decode`)

ELECTRA (DIR/generator/config.json present) trains generator + discriminator jointly as
`ElectraPreTrainingPair` does: shared embeddings, Gumbel-max samples at the masked positions,
MLM + 50 * RTD.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch


def synthetic_batch(vocab_size, batch, seq):
    """The batch `cargo xtask bench` builds: ids 5 + (i * 7919) mod (V - 5), every seventh
    token (i mod 7 == 3) a target, alternating sentence labels."""
    i = torch.arange(batch * seq, dtype=torch.int64)
    ids = (5 + (i * 7919) % (vocab_size - 5)).reshape(batch, seq)
    labels = torch.where((i % 7 == 3).reshape(batch, seq), ids, torch.full_like(ids, -100))
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
        "labels": labels,
        "sentence": torch.arange(batch, dtype=torch.int64) % 2,
    }


def timed(fn, warmup, steps):
    times = []
    for k in range(warmup + steps):
        start = time.perf_counter()
        fn()
        if k >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def load_config(path):
    import transformers

    with open(os.path.join(path, "config.json")) as f:
        raw = json.load(f)
    return transformers.AutoConfig.for_model(**raw), raw.get("architectures", [""])[0]


def optimizer(params):
    # Sesame's bench: AdamW lr 1e-4, weight decay 0.01, eps 1e-6.
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, eps=1e-6)


def pretrain(args):
    import transformers

    config, architecture = load_config(args.config)
    data = synthetic_batch(config.vocab_size, args.batch_size, args.seq_len)
    inputs = {k: data[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    generator_dir = os.path.join(args.config, "generator")
    if os.path.isfile(os.path.join(generator_dir, "config.json")):
        step = electra_step(config, load_config(generator_dir)[0], data, inputs)
    elif config.model_type == "xlnet":
        step = xlnet_step(config, os.path.join(args.config, "batch.safetensors"))
    else:
        model = getattr(transformers, architecture)(config)
        model.train()
        opt = optimizer(model.parameters())
        labels = {"labels": data["labels"]}
        if config.model_type == "bart":
            # Denoising: the target is the whole block (Sesame's bench: source = target).
            inputs = {k: data[k] for k in ("input_ids", "attention_mask")}
            labels = {"labels": data["input_ids"]}
        if architecture.endswith("ForPreTraining"):
            key = "sentence_order_label" if config.model_type == "albert" else "next_sentence_label"
            labels[key] = data["sentence"]

        def step():
            loss = model(**inputs, **labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    median = timed(step, args.warmup, args.steps)
    return {"median_step_s": median, "tokens_per_s": args.batch_size * args.seq_len / median}


def electra_step(config, generator_config, data, inputs):
    import transformers

    discriminator = transformers.ElectraForPreTraining(config)
    generator = transformers.ElectraForMaskedLM(generator_config)
    generator.electra.embeddings = discriminator.electra.embeddings
    generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
    discriminator.train()
    generator.train()
    params = {id(p): p for p in list(discriminator.parameters()) + list(generator.parameters())}
    opt = optimizer(list(params.values()))
    masked = data["labels"] != -100
    original = torch.where(masked, data["labels"], data["input_ids"])
    # Sesame's pre-training config says at what temperature the generator samples.
    temperature = getattr(config, "generator_temperature", None) or 1.0

    def step():
        gen = generator(**inputs, labels=data["labels"])
        logits = gen.logits.detach()[masked] / temperature
        gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_min(1e-9)))
        corrupted = original.clone()
        corrupted[masked] = (logits + gumbel).argmax(-1)
        replaced = (corrupted != original).long()
        disc = discriminator(input_ids=corrupted, attention_mask=inputs["attention_mask"], token_type_ids=inputs["token_type_ids"], labels=replaced)
        loss = gen.loss + 50.0 * disc.loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def xlnet_step(config, batch_path):
    """XLNet's permutation-LM step on the batch Sesame's pipeline built (perm_mask,
    target_mapping, labels of the predicted tokens), over the memory of the previous step, as
    `cargo xtask train xlnet` runs it (config.json's mem_len, reuse_len and bi_data)."""
    import transformers
    from safetensors.torch import load_file

    batch = load_file(batch_path)
    model = transformers.XLNetLMHeadModel(config)
    model.train()
    opt = optimizer(model.parameters())
    mems = [None]

    def step():
        out = model(**batch, mems=mems[0], use_mems=True)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        mems[0] = out.mems

    return step


def infer(args):
    import transformers

    config, _ = load_config(args.config)
    # The base model as Sesame builds it: with its pooler where the family has one.
    model = transformers.AutoModel.from_config(config)
    model.eval()
    inputs = {k: v for k, v in synthetic_batch(config.vocab_size, args.batch_size, args.seq_len).items() if k in ("input_ids", "attention_mask", "token_type_ids")}

    def step():
        with torch.inference_mode():
            model(**inputs).last_hidden_state.sum().item()

    median = timed(step, args.warmup, args.steps)
    return {"median_step_s": median, "tokens_per_s": args.batch_size * args.seq_len / median}


def embed(args):
    start = time.perf_counter()
    from sentence_transformers import SentenceTransformer

    import_s = time.perf_counter() - start
    with open(args.sentences) as f:
        sentences = [line.rstrip("\n") for line in f if line.strip()]
    start = time.perf_counter()
    model = SentenceTransformer(args.model, device="cpu")
    load_s = time.perf_counter() - start
    times = []
    for k in range(args.warmup + args.steps):
        start = time.perf_counter()
        model.encode(sentences, batch_size=args.batch_size, normalize_embeddings=args.normalize)
        if k >= args.warmup:
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {"load_s": load_s, "import_s": import_s, "median_encode_s": median, "sentences_per_s": len(sentences) / median, "sentences": len(sentences)}


def gemm(args):
    m, k, n = (int(d) for d in args.gemm_shape.split("x")) if args.gemm_shape else (args.gemm_size,) * 3
    # --transposed: the right-hand side stored [n, k] and read transposed, as a tied LM head.
    a, b = torch.randn(m, k), (torch.randn(n, k).T if args.transposed else torch.randn(k, n))
    median = timed(lambda: (a @ b)[0, 0].item(), args.warmup, args.steps)
    result = {"median_s": median, "gflops": 2 * m * k * n / median / 1e9}
    # The same product through NumPy's BLAS (OpenBLAS in its wheels), limited to torch's threads.
    import numpy
    from threadpoolctl import threadpool_info, threadpool_limits

    an, bn = a.numpy(), b.numpy()
    with threadpool_limits(limits=torch.get_num_threads(), user_api="blas"):
        blas = [p for p in threadpool_info() if p["user_api"] == "blas" and "numpy" in p["filepath"]]
        median = timed(lambda: (an @ bn)[0, 0].item(), args.warmup, args.steps)
    result.update({"openblas_gflops": 2 * m * k * n / median / 1e9, "numpy": numpy.__version__,
                   "openblas": blas[0]["version"] if blas else None,
                   "openblas_threads": blas[0]["num_threads"] if blas else None})
    return result


UNILM_MASK_ID = 4  # the [MASK] of `bench --family unilm` (the synthetic ids start at 5)


def unilm_decode(model, source, n, num_beams):
    """microsoft/unilm v1's sequence-to-sequence decoding (`BertForSeq2SeqDecoder`, s2s-ft's
    modeling_decoding.py) on transformers' `BertForMaskedLM`, exactly `n` tokens: each step runs
    the previous token and a [MASK] after it through every layer against that layer's input
    states so far, whose keys and values are projected again at every step as in
    microsoft/unilm, and takes the [MASK]'s cloze prediction. Source (token type 4) sees itself;
    the target (5) sees the source and itself up to its position. Greedy, or beam search over
    summed log-probabilities (no early end: `min_new_tokens` = `n` on Sesame's side)."""
    bert, cls = model.bert, model.cls
    layers = bert.encoder.layer
    heads = model.config.num_attention_heads
    b, s = source.shape
    k = num_beams

    def run(ids, types, positions, history, allowed):
        rows, q = ids.shape
        h = bert.embeddings(input_ids=ids, token_type_ids=types, position_ids=positions)
        inputs = []
        for i, layer in enumerate(layers):
            inputs.append(h)
            kv = h if history is None else torch.cat([history[i], h], 1)
            att = layer.attention.self
            split = lambda x: x.view(rows, x.shape[1], heads, -1).transpose(1, 2)
            query, key, value = split(att.query(h)), split(att.key(kv)), split(att.value(kv))
            scores = query @ key.transpose(-1, -2) / query.shape[-1] ** 0.5
            scores = scores.masked_fill(~allowed, -10000.0)
            context = (scores.softmax(-1) @ value).transpose(1, 2).reshape(rows, q, -1)
            attended = layer.attention.output(context, h)
            h = layer.output(layer.intermediate(attended), attended)
        return cls(h[:, -1]), inputs

    mask = torch.full((b, 1), UNILM_MASK_ID)
    # The source and a [MASK] after it; the [MASK] sees everything, the source not the [MASK].
    allowed = torch.ones(s + 1, s + 1, dtype=torch.bool)
    allowed[:s, s] = False
    types = torch.tensor([4] * s + [5]).expand(b, -1)
    logits, inputs = run(torch.cat([source, mask], 1), types, torch.arange(s + 1).expand(b, -1), None, allowed)
    history = [x[:, :-1] for x in inputs]
    scores = None
    if k > 1:
        history = [x.repeat_interleave(k, 0) for x in history]
        logits = logits.repeat_interleave(k, 0)
        scores = torch.full((b, k), float("-inf"))
        scores[:, 0] = 0.0
    out = []
    for step in range(n):
        if k == 1:
            token = logits.argmax(-1)
        else:
            total = scores.unsqueeze(-1) + logits.log_softmax(-1).view(b, k, -1)
            scores, best = total.view(b, -1).topk(k, dim=-1)
            vocab = logits.shape[-1]
            rows = (torch.arange(b).unsqueeze(-1) * k + best // vocab).view(-1)
            token = (best % vocab).view(-1)
            history = [x.index_select(0, rows) for x in history]
            out = [t.index_select(0, rows) for t in out]
        out.append(token)
        if step + 1 == n:
            break
        past = history[0].shape[1]
        # The new token (seeing up to itself) and a [MASK] after it (seeing everything).
        allowed = torch.ones(2, past + 2, dtype=torch.bool)
        allowed[0, past + 1] = False
        rows = token.shape[0]
        ids = torch.stack([token, torch.full((rows,), UNILM_MASK_ID)], 1)
        logits, inputs = run(ids, torch.full((rows, 2), 5), torch.arange(past, past + 2).expand(rows, -1), history, allowed)
        history = [torch.cat([h, x[:, :-1]], 1) for h, x in zip(history, inputs)]
    return torch.stack(out, 1)


def generate(args):
    import resource

    import transformers

    _, architecture = load_config(args.config)
    model = getattr(transformers, architecture).from_pretrained(args.config).eval()
    data = synthetic_batch(model.config.vocab_size, args.batch_size, args.seq_len)
    n = args.max_new_tokens
    if architecture == "BertForMaskedLM":
        rows = args.batch_size * args.num_beams if args.num_beams > 1 else args.batch_size

        def step():
            with torch.inference_mode():
                out = unilm_decode(model, data["input_ids"], n, args.num_beams)
            assert out.shape == (rows, n), out.shape
    else:
        # An encoder-decoder returns the decoder start and the new tokens; a left-to-right model
        # (XLNet) the prompt and the new tokens.
        length = n + 1 if model.config.is_encoder_decoder else args.seq_len + n

        def step():
            with torch.inference_mode():
                out = model.generate(data["input_ids"], attention_mask=data["attention_mask"], max_new_tokens=n,
                                     min_new_tokens=n, num_beams=args.num_beams, do_sample=False)
            assert out.shape[1] == length, out.shape

    median = timed(step, args.warmup, args.steps)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"median_s": median, "tokens_per_s": args.batch_size * n / median, "peak_rss_mib": peak,
            "threads": torch.get_num_threads(), "torch": torch.__version__, "transformers": transformers.__version__}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["pretrain", "infer", "embed", "gemm", "generate"])
    parser.add_argument("--config", help="directory with config.json (pretrain, infer)")
    parser.add_argument("--model", help="sentence-transformers model directory (embed)")
    parser.add_argument("--sentences", help="file with one sentence per line (embed)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--normalize", action="store_true")
    parser.add_argument("--gemm-size", type=int, default=1024)
    parser.add_argument("--gemm-shape", help="MxKxN (gemm), instead of the square of --gemm-size")
    parser.add_argument("--transposed", action="store_true", help="gemm: the right-hand side stored [N, K], read transposed")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--num-beams", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.mode in ("pretrain", "infer", "generate") and not args.config:
        parser.error(f"{args.mode} needs --config")
    if args.mode == "embed" and not (args.model and args.sentences):
        parser.error("embed needs --model and --sentences")
    result = {"pretrain": pretrain, "infer": infer, "embed": embed, "gemm": gemm, "generate": generate}[args.mode](args)
    # The kernels' ISA level PyTorch dispatched to on this CPU (DEFAULT, AVX2, AVX512, ...), and
    # whether its GEMM is MKL's.
    result.update({"torch": torch.__version__, "threads": torch.get_num_threads(),
                   "cpu_capability": torch.backends.cpu.get_cpu_capability(), "mkl": torch.backends.mkl.is_available()})
    import transformers

    result["transformers"] = transformers.__version__
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
