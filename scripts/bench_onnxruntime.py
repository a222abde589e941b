#!/usr/bin/env python3
"""The ONNX Runtime side of `cargo xtask bench --mode embed|infer --compare-onnxruntime`.

`--mode infer` times forward passes of the model directory `bench` wrote (`--config`) on one
`--batch-size` x `--seq-len` batch of ids, exported and quantised as in step 1 and 2 below,
and prints tokens/s for each form. `--mode embed` (the default):

What a user serving sentence embeddings on a CPU with ONNX Runtime runs, on the same sentences
and machine as Sesame's side:

1. Export: `torch.onnx.export` of the checkpoint's base model (transformers `AutoModel`, eager
   attention, the TorchScript exporter, opset 17, batch and sequence axes dynamic), inputs
   `input_ids`, `attention_mask` (and `token_type_ids` when the tokenizer gives them), output
   `last_hidden_state`.
2. int8: `onnxruntime.quantization.quantize_dynamic` with its defaults (int8 weights, one scale
   per tensor; activations quantised per batch at run time), and `int8_per_channel`: the same
   with `per_channel=True` (a scale per output channel, as Sesame's `--int8` weights), the
   peers of `--int8`.
3. Embed: the sentences tokenized by the checkpoint's tokenizer (truncated at
   sentence-transformers' `max_seq_length` when the directory has one, else at the model's
   positions), sorted by length, cut into batches of `--batch-size`, each padded to its longest
   row; mean (or CLS) pooling over the mask, L2 norm with `--normalize`; one session per model
   with as many intra-op threads as torch uses (`torch.get_num_threads()`). Tokenizing is inside
   the timed run, as it is on Sesame's side.

Prints one JSON object: for `fp32`, `int8` and `int8_per_channel`, the export/quantise and session-load seconds,
the median seconds to embed every sentence, sentences/s, and the smallest cosine similarity of
an embedding to transformers' own (fp32, one sentence at a time).
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch

from bench_pytorch import timed  # the median of --steps timed runs after --warmup


def max_seq_length(model_dir):
    path = os.path.join(model_dir, "sentence_bert_config.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f).get("max_seq_length")
    return None


def pool(hidden, mask, pooling, normalize):
    if pooling == "cls":
        out = hidden[:, 0]
    else:
        m = mask[..., None].astype(np.float32)
        out = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
    if normalize:
        out = out / np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)
    return out


def export_and_quantize(model, names, sample, work):
    """`model` exported to ONNX in `work` (inputs `names`, traced on `sample`) and quantised twice:
    `(kind, path, seconds to make it)` for fp32, int8 (quantize_dynamic's defaults) and
    int8_per_channel."""
    from onnxruntime.quantization import quantize_dynamic

    fp32_path, int8_path = os.path.join(work, "model.onnx"), os.path.join(work, "model.int8.onnx")
    channel_path = os.path.join(work, "model.int8-per-channel.onnx")
    start = time.perf_counter()
    dynamic = {n: {0: "batch", 1: "sequence"} for n in names + ["last_hidden_state"]}

    class ByName(torch.nn.Module):
        """The model called with its inputs by name (the exporter passes them by position)."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return self.model(**dict(zip(names, inputs))).last_hidden_state

    with torch.inference_mode():
        torch.onnx.export(ByName(), tuple(sample[n] for n in names), fp32_path, input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes=dynamic, opset_version=17, dynamo=False)
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    quantize_dynamic(fp32_path, int8_path)
    quantize_s = time.perf_counter() - start
    start = time.perf_counter()
    quantize_dynamic(fp32_path, channel_path, per_channel=True)
    channel_s = time.perf_counter() - start
    return (("fp32", fp32_path, export_s), ("int8", int8_path, quantize_s), ("int8_per_channel", channel_path, channel_s))


def session(path, threads):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def remove(work):
    for name in os.listdir(work):
        os.remove(os.path.join(work, name))
    os.rmdir(work)


def infer(args):
    """`--mode infer`: forward passes of the base model of `--config` (the directory `bench`
    wrote, config.json and weights) on one `--batch-size` × `--seq-len` batch of ids, in fp32 and
    both int8 forms: tokens/s each."""
    import onnxruntime as ort
    import transformers

    model = transformers.AutoModel.from_pretrained(args.config, attn_implementation="eager").eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, (args.batch_size, args.seq_len), generator=generator)
    sample = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if getattr(model.config, "type_vocab_size", 0):
        sample["token_type_ids"] = torch.zeros_like(ids)
    names = list(sample)
    threads = torch.get_num_threads()
    work = tempfile.mkdtemp(prefix="sesame-onnx-")
    result = {"onnxruntime": ort.__version__, "threads": threads, "batch_size": args.batch_size, "seq_len": args.seq_len}
    feed = {n: sample[n].numpy().astype(np.int64) for n in names}
    for kind, path, prepare_s in export_and_quantize(model, names, sample, work):
        run = session(path, threads)
        median = timed(lambda: run.run(["last_hidden_state"], feed), args.warmup, args.steps)
        result[kind] = {"prepare_s": prepare_s, "median_step_s": median, "tokens_per_s": args.batch_size * args.seq_len / median}
        print(f"onnxruntime {kind}: {args.batch_size * args.seq_len / median:.0f} tokens/s (threads {threads})", file=sys.stderr)
    remove(work)
    json.dump(result, sys.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["embed", "infer"], default="embed")
    parser.add_argument("--model", help="embed: HF or sentence-transformers model directory")
    parser.add_argument("--sentences", help="embed: file with one sentence per line")
    parser.add_argument("--config", help="infer: the model directory bench wrote")
    parser.add_argument("--seq-len", type=int, default=128, help="infer: tokens per sequence")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--pooling", choices=["mean", "cls"], default="mean")
    parser.add_argument("--normalize", action="store_true")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    if args.mode == "infer":
        return infer(args)
    if not (args.model and args.sentences):
        parser.error("--mode embed needs --model and --sentences")

    import onnxruntime as ort
    import transformers

    with open(args.sentences) as f:
        sentences = [line.rstrip("\n") for line in f]
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    model = transformers.AutoModel.from_pretrained(args.model, attn_implementation="eager").eval()
    # Truncated where sentence-transformers does, else at the model's positions (RoBERTa's
    # start after the padding id).
    positions = model.config.max_position_embeddings - (model.config.pad_token_id + 1 if model.config.model_type == "roberta" else 0)
    limit = max_seq_length(args.model) or positions
    encode = lambda texts, padding: tokenizer(texts, padding=padding, truncation=True, max_length=limit, return_tensors="np")
    sample = tokenizer(["a sample sentence", "another"], padding=True, return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]
    # transformers' own embeddings, one sentence at a time (no padding), the reference.
    with torch.inference_mode():
        reference = []
        for text in sentences:
            enc = encode([text], False)
            hidden = model(**{n: torch.from_numpy(enc[n]) for n in names}).last_hidden_state.numpy()
            reference.append(pool(hidden, enc["attention_mask"], args.pooling, True)[0])
    reference = np.stack(reference)

    threads = torch.get_num_threads()
    work = tempfile.mkdtemp(prefix="sesame-onnx-")
    kinds = export_and_quantize(model, names, sample, work)

    # Batches by length: the order is fixed once; the timed run tokenizes every batch.
    lengths = [len(tokenizer(s, truncation=True, max_length=limit)["input_ids"]) for s in sentences]
    order = sorted(range(len(sentences)), key=lambda i: -lengths[i])
    batches = [order[i:i + args.batch_size] for i in range(0, len(order), args.batch_size)]

    result = {"onnxruntime": ort.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
              "threads": threads, "sentences": len(sentences), "batch_size": args.batch_size, "opset": 17,
              "quantization": "quantize_dynamic defaults (QInt8 weights, per tensor; activations per batch); int8_per_channel: per_channel=True"}
    for kind, path, prepare_s in kinds:
        start = time.perf_counter()
        run_session = session(path, threads)
        load_s = time.perf_counter() - start
        out = np.zeros((len(sentences), reference.shape[1]), dtype=np.float32)

        def run():
            for batch in batches:
                enc = encode([sentences[i] for i in batch], True)
                hidden = run_session.run(["last_hidden_state"], {n: enc[n].astype(np.int64) for n in names})[0]
                out[batch] = pool(hidden, enc["attention_mask"], args.pooling, args.normalize)

        median = timed(run, args.warmup, args.steps)
        unit = out / np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)
        cosine = (unit * reference).sum(1)
        result[kind] = {"prepare_s": prepare_s, "load_s": load_s, "median_encode_s": median,
                        "sentences_per_s": len(sentences) / median, "min_cosine_to_transformers": float(cosine.min())}
        print(f"onnxruntime {kind}: {len(sentences) / median:.1f} sentences/s (threads {threads}), "
              f"min cosine to transformers {cosine.min():.5f}", file=sys.stderr)
    remove(work)
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
