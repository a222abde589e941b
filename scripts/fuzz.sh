#!/usr/bin/env bash
# Fuzz every reader of Sesame with libFuzzer (cargo fuzz; not part of CI):
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET ...]     (default: 60 s, every target)
#
# Each target's corpus (fuzz/corpus/TARGET, kept between runs) is seeded from fixtures/ on every
# run. A target fails when an input panics (outside the readers that turn a panic into an
# error), aborts, uses more than 2 GB (-rss_limit_mb=2048) or runs more than 1 s
# (-timeout=1); the input is kept in fuzz/artifacts/TARGET/ (replay it with
# `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/FILE`). One summary line per target;
# the exit status is 1 when any target failed.
#
# Needs the nightly toolchain and cargo-fuzz (`rustup toolchain install nightly`,
# `cargo install cargo-fuzz`). SANITIZER=address builds with AddressSanitizer (slower; the
# default, none, finds panics, aborts, leaks of time and memory, which is what safe Rust can
# do wrong); JOBS=N runs N fuzzing processes per target.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "error: SECONDS_PER_TARGET must be a positive integer, not '$seconds'" >&2; exit 2; }
[[ ${JOBS:-1} =~ ^[1-9][0-9]*$ ]] || { echo "error: JOBS must be a positive integer, not '${JOBS}'" >&2; exit 2; }
shift || true
sanitizer=${SANITIZER:-none}
jobs=${JOBS:-1}
cd "$root/fuzz"
all=$(cargo +nightly fuzz list) || { echo "error: cargo +nightly fuzz is not available (rustup toolchain install nightly; cargo install cargo-fuzz)" >&2; exit 2; }
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || mapfile -t targets <<<"$all"
for t in "${targets[@]}"; do
  grep -qx "$t" <<<"$all" || { echo "error: no fuzz target '$t' (there are: $(echo $all))" >&2; exit 2; }
done

f=$root/fixtures
# seed TARGET NAME [PREFIX_BYTE] FILE...: the files' contents (after the byte, when given) as
# one corpus entry.
seed() {
  local target=$1 name=$2 prefix=$3; shift 3
  mkdir -p "corpus/$target"
  { [[ -n $prefix ]] && printf "\\x$prefix"; cat "$@"; } >"corpus/$target/seed-$name"
}
seeds() {
  local i=0 p
  for p in "$f"/bert/*/model.safetensors "$f"/bart/base-model/model.safetensors "$f"/xlnet/base-model/model.safetensors; do
    seed checkpoint_safetensors "$((i++))" "" "$p"
  done
  for p in $(find "$f" -name pytorch_model.bin); do seed checkpoint_pytorch "$((i++))" "" "$p"; done
  for p in $(find "$f" -name tokenizer.json); do seed tokenizer_json "$((i++))" "" "$p"; done
  seed tokenizer_spiece albert 00 "$f/albert/spiece/spiece.model"
  seed tokenizer_spiece xlnet 01 "$f/xlnet/spiece/spiece.model"
  seed tokenizer_vocab_files wordpiece 00 "$f/bert/base-fill-mask/vocab.txt"
  { printf '\x01'; cat "$f/roberta/tokenizer/vocab.json"; printf '\x00'; cat "$f/roberta/tokenizer/merges.txt"; } >"corpus/tokenizer_vocab_files/seed-bpe"
  local families=(bert/base-model roberta/base-model albert/base-model electra/base-model unilm/v1-checkpoint bart/base-model xlnet/base-model)
  for i in "${!families[@]}"; do seed family_config "$i" "0$i" "$f/${families[$i]}/config.json"; done
  for p in $(find "$f" -name generation_config.json); do seed generation_config "$((i++))" "" "$p"; done
  seed labelled_rows csv 00 "$f/data/classify.csv"
  seed labelled_rows tsv 01 "$f/data/pairs.tsv"
  seed labelled_rows jsonl 02 "$f/data/multilabel.jsonl"
  seed tagged_sentences conll 00 "$f/data/tags.conll"
  seed tagged_sentences jsonl 01 "$f/data/tags.jsonl"
  seed squad_questions json "" "$f/data/squad.json"
  seed squad_questions jsonl "" "$f/data/squad.jsonl"
  seed input_lines jsonl "" "$f/data/inputs.jsonl"
  # forward_inputs: each checkpoint's recorded inputs and labels (its io.safetensors' `input.*`
  # and `label.*`, under transformers' names), after the byte that picks the checkpoint.
  local checkpoints
  mapfile -t checkpoints < <(sed -n '/^pub const CHECKPOINTS/,/^];/s/^ *"\(.*\)",$/\1/p' fuzz_targets/forward_inputs.rs)
  mkdir -p corpus/forward_inputs
  for i in "${!checkpoints[@]}"; do
    python3 - "$f/${checkpoints[$i]}/io.safetensors" "$i" >"corpus/forward_inputs/seed-$i" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
out, blob = {}, b""
for name, t in header.items():
    kind, _, key = name.partition(".")
    if kind in ("input", "label"):
        start, end = t["data_offsets"]
        out[key] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [len(blob), len(blob) + end - start]}
        blob += data[start:end]
text = json.dumps(out).encode()
sys.stdout.buffer.write(bytes([int(sys.argv[2])]) + struct.pack("<Q", len(text)) + text + blob)
PY
  done
}
seeds

cargo +nightly fuzz build --sanitizer "$sanitizer" --debug-assertions >&2
failed=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t" logs
  start=$(date +%s)
  parallel=()
  [[ $jobs -gt 1 ]] && parallel=(-jobs="$jobs" -workers="$jobs")
  if cargo +nightly fuzz run --sanitizer "$sanitizer" --debug-assertions "$t" "corpus/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=1 -print_final_stats=1 "${parallel[@]}" \
      >"logs/$t.log" 2>&1; then
    status=ok
  else
    status=FAILED failed=1
  fi
  cat fuzz-*.log >>"logs/$t.log" 2>/dev/null || true
  runs=$(grep -h 'stat::number_of_executed_units' "logs/$t.log" | awk '{s += $2} END {print s + 0}')
  echo "$t: $status, $(( $(date +%s) - start )) s, $runs inputs, corpus $(ls "corpus/$t" | wc -l), artifacts $(ls "artifacts/$t" | wc -l) (log: fuzz/logs/$t.log)"
  rm -f fuzz-*.log
done
exit $failed
