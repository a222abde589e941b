#!/usr/bin/env python3
"""Load a model directory with transformers, run it on the inputs of an io.safetensors file
and write its outputs. Used by Sesame's round-trip test: Sesame saves a model, transformers
must load it strictly (no missing or unexpected weights) and give Sesame's outputs.

    python scripts/hf_forward.py MODEL_DIR ARCHITECTURE INPUTS.safetensors OUT.safetensors
"""

import sys

import torch
import transformers
from safetensors.torch import load_file, save_file


def main():
    model_dir, arch, inputs_path, out_path = sys.argv[1:5]
    cls = getattr(transformers, arch)
    model, info = cls.from_pretrained(model_dir, output_loading_info=True, attn_implementation="eager")
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:
        sys.exit(f"transformers did not load {model_dir} cleanly: {problems}")
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


if __name__ == "__main__":
    main()
