#!/usr/bin/env bash
# Create (once) a venv with infinity-emb, the peer server of `cargo xtask bench --mode serve
# --compare-infinity`, and print the variable that names its program.
#
#   eval "$(scripts/setup-python.sh)"; eval "$(scripts/setup-infinity.sh)"
#
# infinity-emb 0.0.78 needs numpy 1 and transformers 4, while Sesame's venv holds numpy 2 and
# transformers 5: this venv has its own copies of those, and takes torch (2.9.0, the same build)
# from Sesame's venv, after its own packages on the path.
set -euo pipefail
cache=${SESAME_CACHE:-$HOME/.cache/sesame}
base=$cache/venv
venv=$cache/infinity-venv
requirements='infinity-emb[server]==0.0.78 numpy==1.26.4 transformers==4.57.6 sentence-transformers==4.1.0 huggingface-hub==0.36.2'
stamp=$venv/.sesame-requirements
if [ ! -x "$base/bin/python" ]; then
  echo "no $base: run scripts/setup-python.sh first (it holds the torch this venv uses)" >&2
  exit 1
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]; then
  echo "setting up $venv ($requirements)" >&2
  python3 -m venv "$venv" >&2
  site=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  base_site=$("$base/bin/python" -c 'import site; print(site.getsitepackages()[0])')
  echo "import sys; sys.path.append('$base_site')" > "$site/zz_sesame_torch.pth"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q $requirements >&2
  echo "$requirements" > "$stamp"
fi
"$venv/bin/python" -c 'import torch, infinity_emb' >&2
echo "export SESAME_INFINITY=\"$venv/bin/infinity_emb\""
