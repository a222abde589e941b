#!/usr/bin/env bash
# The speed columns of docs/guide/small-models.md: `cargo xtask classify` timed end to end (process
# start, loading, tokenizing, the forward passes) on the first 512 mails of SpamAssassin's test
# file, each cut to its first 600 characters, in rounds that alternate the variants, each
# variant's seconds and its speed-up over the first variant's median.
#
#   scripts/small_models_speed.sh [--rounds N] [--texts N] [--chars N] [--cores LIST] TEST_CSV \
#       NAME=DIR[:FLAGS] [NAME=DIR[:FLAGS] ...]
#
# FLAGS are extra `classify` flags, comma-separated (`--int8`, `--speed,0.1`). The first variant
# is the baseline. Example, the tables' rows (test.csv from scripts/fetch_spamassassin.py; the
# models from docs/guide/fine-tuning.md and docs/guide/small-models.md's commands):
#
#   scripts/small_models_speed.sh ~/.cache/sesame/data/spam/test.csv full=runs/spam/model \
#       full-int8=runs/spam/model:--int8 student=runs/spam-student/model \
#       pruned-36=runs/spam-pruned-36 exit-0.1=runs/spam-exit/model:--speed,0.1
#
# Prints one JSON line per variant: {"name", "seconds": [per round], "median", "speedup",
# "accuracy"} (the share of the texts whose label equals the file's). Uses the release build of
# xtask (built first; XTASK=PATH runs that binary instead); `--cores 0,1` pins every run to
# those cores with taskset.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=2 texts=512 chars=600 cores=""
die() { echo "error: $*" >&2; exit 1; }
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --rounds) rounds=${2:-}; shift 2 ;;
    --texts) texts=${2:-}; shift 2 ;;
    --chars) chars=${2:-}; shift 2 ;;
    --cores) cores=${2:-}; shift 2 ;;
    *) die "unknown option $1 (see the header of $0)" ;;
  esac
done
for n in "$rounds" "$texts" "$chars"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "--rounds, --texts and --chars take a positive integer, not '$n'"
done
[[ -z $cores || $cores =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--cores takes a list such as 0,1, not '$cores'"
[[ $# -ge 2 ]] || die "give the test CSV and at least one NAME=DIR[:FLAGS] (see the header of $0)"
csv=$1; shift
[[ -f $csv ]] || die "$csv: no such file (scripts/fetch_spamassassin.py writes test.csv)"
names=() dirs=() flags=()
for spec in "$@"; do
  [[ $spec == *=* ]] || die "$spec: expected NAME=DIR[:FLAGS]"
  name=${spec%%=*} rest=${spec#*=}
  dir=${rest%%:*} extra=""
  [[ $rest == *:* ]] && extra=${rest#*:}
  [[ -f $dir/config.json ]] || die "$name: $dir has no config.json"
  names+=("$name") dirs+=("$dir") flags+=("${extra//,/ }")
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The texts (one per line, as `classify --input` reads them) and their labels.
python3 - "$csv" "$texts" "$chars" "$work" <<'PY' || die "$csv: not a CSV with text and label columns"
import csv, json, sys
path, n, chars, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = list(csv.DictReader(open(path, newline="", encoding="utf-8")))
if not rows or "text" not in rows[0] or "label" not in rows[0]:
    sys.exit(1)
rows = rows[:n]
with open(f"{work}/texts.jsonl", "w") as f:
    for r in rows:
        f.write(json.dumps({"text": " ".join(r["text"][:chars].split())}) + "\n")
json.dump([r["label"] for r in rows], open(f"{work}/labels.json", "w"))
PY

xtask=${XTASK:-}
if [[ -z $xtask ]]; then
  (cd "$root" && cargo build --release -q -p xtask) || die "cargo build failed"
  xtask=$root/target/release/xtask
fi
[[ -x $xtask ]] || die "XTASK=$xtask is not an executable"
pin=()
[[ -n $cores ]] && pin=(taskset -c "$cores")

declare -A seconds
for ((round = 1; round <= rounds; round++)); do
  for i in "${!names[@]}"; do
    # shellcheck disable=SC2086
    start=$(date +%s%N)
    "${pin[@]}" "$xtask" classify --model "${dirs[$i]}" ${flags[$i]} --input "$work/texts.jsonl" >"$work/out-$i.jsonl" 2>"$work/err" \
      || die "${names[$i]}: classify failed: $(tail -1 "$work/err")"
    end=$(date +%s%N)
    seconds[$i]+="$(( (end - start) / 1000000 )) "
  done
done

for i in "${!names[@]}"; do
  python3 - "${names[$i]}" "${seconds[$i]}" "${seconds[0]}" "$work/out-$i.jsonl" "$work/labels.json" <<'PY'
import json, statistics, sys
name, mine, base, out, labels = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4], sys.argv[5]
mine, base = [int(ms) / 1000 for ms in mine], [int(ms) / 1000 for ms in base]
labels = json.load(open(labels))
predicted = [json.loads(l)["label"] for l in open(out)]
right = sum(p == l for p, l in zip(predicted, labels)) / len(labels) if len(predicted) == len(labels) else None
median = statistics.median(mine)
print(json.dumps({"name": name, "seconds": [round(s, 2) for s in mine], "median": round(median, 2),
                  "speedup": round(statistics.median(base) / median, 2), "accuracy": right}))
PY
done
