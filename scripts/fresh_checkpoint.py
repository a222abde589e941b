"""A checkpoint with another's tensor names, shapes and dtypes and fresh weights.

Speed does not depend on the values, so a benchmark can run a model whose weights cannot travel
(all-MiniLM-L6-v2's 90 MB file to a machine that takes 64 MiB) on a stand-in made where it runs:

    python3 scripts/fresh_checkpoint.py shapes MODEL/model.safetensors shapes.json   # here
    python3 scripts/fresh_checkpoint.py make shapes.json COPY/model.safetensors      # there

(COPY holds MODEL's other files.) Weights are normal with σ 0.02 (seed 0), LayerNorm weights 1,
biases 0, `position_ids` 0..n: BERT's initialisation. Embeddings made from them say nothing of the
real model's; only timings carry over.
"""
import json
import sys


def shapes(src, out):
    from safetensors import safe_open

    with safe_open(src, "np") as f:
        table = {k: {"shape": list(f.get_slice(k).get_shape()), "dtype": f.get_slice(k).get_dtype()} for k in f.keys()}
    with open(out, "w") as w:
        json.dump(table, w)


def make(table_path, out):
    import torch
    from safetensors.torch import save_file

    table = json.load(open(table_path))
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for name, t in table.items():
        shape = t["shape"]
        if t["dtype"] not in ("F32", "I64"):
            sys.exit(f"error: {table_path}: tensor {name} has dtype {t['dtype']}; only F32 and I64 are made")
        if t["dtype"] == "I64":
            if not name.endswith("position_ids"):
                sys.exit(f"error: {table_path}: integer tensor {name} is not position ids")
            tensors[name] = torch.arange(shape[-1], dtype=torch.int64).expand(shape).contiguous()
        elif "LayerNorm.weight" in name or "layer_norm.weight" in name:
            tensors[name] = torch.ones(shape)
        elif name.endswith("bias"):
            tensors[name] = torch.zeros(shape)
        else:
            tensors[name] = torch.randn(shape, generator=g) * 0.02
    save_file(tensors, out, metadata={"format": "pt"})


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("shapes", "make"):
        sys.exit("usage: fresh_checkpoint.py shapes SRC.safetensors OUT.json | make TABLE.json OUT.safetensors")
    try:
        {"shapes": shapes, "make": make}[sys.argv[1]](sys.argv[2], sys.argv[3])
    except Exception as e:  # one line naming the file, whatever the library raises
        sys.exit(f"error: {sys.argv[2]}: {e}")
