#!/usr/bin/env bash
# Overload, then soak `cargo xtask serve` for MINUTES (60 by default) on loopback: see
# scripts/serve_soak.py. Not part of CI. Uses MiniLM for embeddings when
# scripts/setup-python.sh has fetched it (SESAME_MINILM_DIR), else the tiny fixtures alone.
#   scripts/serve_soak.sh [MINUTES] [more serve_soak.py flags]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-60}
shift || true
cargo build --release -q -p xtask
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A fixture's head with the fill-mask fixture's tokenizer, as the server tests assemble it.
with_tokenizer() {
  local dir="$work/$(echo "$1" | tr / -)"
  mkdir -p "$dir"
  for from in "fixtures/$1" fixtures/bert/base-fill-mask; do
    for f in config.json generation_config.json model.safetensors vocab.txt tokenizer.json tokenizer_config.json; do
      if [ -f "$from/$f" ] && [ ! -f "$dir/$f" ]; then cp "$from/$f" "$dir/$f"; fi
    done
  done
  echo "$dir"
}
embed=${SESAME_MINILM_DIR:-fixtures/bert/base-fill-mask}
exec python3 scripts/serve_soak.py --xtask target/release/xtask --minutes "$minutes" \
  --embed-model "$embed" \
  --classifier "$(with_tokenizer bert/base-seqcls-regression)" \
  --tagger "$(with_tokenizer bert/base-token-classification)" \
  --generator "$(with_tokenizer bart/base-generation)" "$@"
