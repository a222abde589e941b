#!/usr/bin/env python3
"""Load a model directory with transformers, run it on the inputs of an io.safetensors file
and write its outputs. Used by Sesame's round-trip tests: Sesame saves a model, transformers
must load it strictly (no missing or unexpected weights) and give Sesame's outputs.

    python scripts/hf_forward.py MODEL_DIR ARCHITECTURE INPUTS.safetensors OUT.safetensors
    python scripts/hf_forward.py --serve

With --serve it reads one request a line on stdin (a JSON list of those four arguments) and
answers each with one line on stdout: "ok", or "error: " and why. The tests keep one such
process for all their requests: torch and transformers are imported once, not per model.
"""

import json
import sys
import traceback

import torch
import transformers
from safetensors.torch import load_file, save_file


def forward(model_dir, arch, inputs_path, out_path):
    cls = getattr(transformers, arch)
    model, info = cls.from_pretrained(model_dir, output_loading_info=True, attn_implementation="eager")
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:
        raise ValueError(f"transformers did not load {model_dir} cleanly: {problems}")
    model.eval()
    io = load_file(inputs_path)
    inputs = {k[len("input."):]: v for k, v in io.items() if k.startswith("input.")}
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True, return_dict=True)
    tensors = {}
    for key, value in out.items():
        if isinstance(value, tuple):
            for i, v in enumerate(value):
                tensors[f"output.{key}.{i}"] = v.float().contiguous().clone()
        elif isinstance(value, torch.Tensor):  # not past_key_values (a cache object)
            tensors[f"output.{key}"] = value.float().contiguous().clone()
    save_file(tensors, out_path)


def serve():
    for line in sys.stdin:
        try:
            forward(*json.loads(line))
            answer = "ok"
        except Exception as e:  # the request fails, the server goes on
            traceback.print_exc(file=sys.stderr)
            answer = "error: " + " ".join(f"{type(e).__name__}: {e}".split())
        print(answer, flush=True)


def main():
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    try:
        forward(*sys.argv[1:5])
    except ValueError as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()
