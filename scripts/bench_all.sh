#!/usr/bin/env bash
# docs/benchmarks.md's "How to reproduce" commands in one go, each pinned to the same cores, most
# telling first, within a time budget: what one table per machine is made of.
#
#   scripts/bench_all.sh [--xtask PATH] [--cores 0,1] [--budget SECONDS] [--log FILE]
#
# --xtask   a built xtask (default: target/release/xtask; build it first, with --features tch
#           to add the tch rows); --cores  the cores every command is pinned to (taskset;
#           default 0,1, the tables' two); --budget  no command starts after this many seconds
#           (default 1800), and each runs at most 300; --log  a copy of what is printed.
# Needs SESAME_PYTHON (the venv of scripts/setup-python.sh, or any Python with torch,
# transformers, sentence-transformers and onnxruntime) and, for the embed rows, SESAME_MINILM_DIR
# (all-MiniLM-L6-v2, or a stand-in of its shapes: scripts/fresh_checkpoint.py).
set -u
xtask=target/release/xtask cores=0,1 budget=1800 log=
while [ $# -gt 0 ]; do
  case "$1" in
    --xtask) xtask=$2; shift 2 ;;
    --cores) cores=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    *) echo "error: bench_all.sh: unknown argument $1 (--xtask, --cores, --budget, --log)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
[ -x "$xtask" ] || { echo "error: --xtask $xtask: no such program (cargo build --release -p xtask)" >&2; exit 1; }
command -v taskset >/dev/null || { echo "error: taskset (util-linux) is needed to pin the cores" >&2; exit 1; }
taskset -c "$cores" true 2>/dev/null || { echo "error: --cores $cores: not cores of this machine" >&2; exit 1; }
[ -n "${SESAME_PYTHON:-}" ] || { echo "error: SESAME_PYTHON is not set (eval \"\$(scripts/setup-python.sh)\")" >&2; exit 1; }
[ -n "$log" ] && exec > >(tee -a "$log") 2>&1
start=$(date +%s)
echo "== $(date -u), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), cores $cores of:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
bench() {
  local t=$(( $(date +%s) - start ))
  if [ "$t" -gt "$budget" ]; then echo "== skipped at ${t}s: bench $*"; return; fi
  echo "== ${t}s: bench $*"
  timeout 300 taskset -c "$cores" "$xtask" bench "$@" 2>&1 | grep -v '^\['
}
minilm=${SESAME_MINILM_DIR:-}
bench --mode gemm --gemm-size 1024 --compare-pytorch
bench --mode train --family bert --presets mini,base --compare-pytorch
if [ -n "$minilm" ]; then
  bench --mode embed --model "$minilm" --normalize --compare-pytorch --compare-onnxruntime
  bench --mode embed --model "$minilm" --normalize --compare-onnxruntime --int8
else
  echo "== SESAME_MINILM_DIR is not set: no embed rows"
fi
bench --mode infer --family bert --presets mini,base --compare-pytorch --compare-onnxruntime
bench --mode infer --family bert --presets mini,base --compare-onnxruntime --int8
bench --mode gemm --gemm-shapes 1024x768x768,1024x768x3072,1024x3072x768 --compare-pytorch
if "$xtask" bench --backend tch --mode gemm --gemm-size 64 --steps 1 --warmup 0 >/dev/null 2>&1; then
  bench --backend tch --mode train --family bert --presets mini,base --compare-pytorch
  [ -n "$minilm" ] && bench --backend tch --mode embed --model "$minilm" --normalize --compare-pytorch
else
  echo "== no tch rows: this xtask has no tch backend (cargo build --release -p xtask --features tch) or cannot load libtorch (LD_LIBRARY_PATH)"
fi
bench --mode infer --family albert --presets base --compare-pytorch --compare-onnxruntime
bench --mode infer --family albert --presets base --compare-onnxruntime --int8
bench --mode train --family albert --presets base --compare-pytorch
bench --mode generate --presets base --seq-len 64 --max-new-tokens 32 --batch-size 4 --compare-pytorch
bench --mode gemm --gemm-shapes 32x768x768,32x3072x768,32x768x3072,32x768x50265,256x384x384,256x384x1536,256x1536x384 --steps 40 --warmup 10 --compare-pytorch
bench --mode gemm --gemm-shapes 1x768x50265,4x768x50265,16x768x50265,32x768x50265 --gemm-transposed --steps 40 --warmup 10 --compare-pytorch
bench --family xlnet --presets tiny,mini,base --compare-pytorch
bench --family xlnet --mode generate --presets base --seq-len 16 --max-new-tokens 100 --steps 1 --warmup 1 --compare-pytorch
bench --family unilm --mode generate --presets base --seq-len 64 --max-new-tokens 32 --batch-size 4 --compare-pytorch
bench --mode train --family bert --presets mini,base --compare-pytorch
echo "== end $(( $(date +%s) - start ))s"
