#!/usr/bin/env bash
# The QA study of docs/results.md, step by step. Every step is resumable: run this script again after any
# interruption and it continues where it stopped (finished steps cost nothing). Logs go to results/logs/.
# Usage: results/study.sh [DATA_DIR]   (default ../shared/data); PPL_TOK=path/to/ppl-tok to override the command;
# STEPS="name name" runs only those steps (e.g. two chains side by side, each with OMP_NUM_THREADS=1);
# EXTRA="..." is appended to every step's arguments (later ones win), e.g. one folder on two cores:
#   OMP_NUM_THREADS=1 STEPS=hellaswag-smollm2 EXTRA="--ray --workers 2 --batch-size 4" results/study.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
PPL=${PPL_TOK:-.venv/bin/ppl-tok}
RUNS=results/runs
mkdir -p results/logs

step() {  # step NAME ARGS...: one resumable `ppl-tok qa run`
  local name=$1; shift
  if [[ -n "${STEPS:-}" && " $STEPS " != *" $name "* ]]; then return; fi
  echo "$(date -u +%FT%TZ) start $name" >> results/logs/study.log
  # shellcheck disable=SC2086  # EXTRA is split into words on purpose
  "$PPL" qa run --data-dir "$DATA" --json "$@" ${EXTRA:-} > "results/logs/$name.json" 2> "results/logs/$name.err"
  echo "$(date -u +%FT%TZ) done  $name" >> results/logs/study.log
}

# SmolLM2-135M, look-ahead N=64, 500 tuning / 500 test questions per data set
step obqa-smollm2 --dataset openbookqa --model smollm2-135m --samples 64 --limit 500 --batch-size 16 \
  --out $RUNS/openbookqa-smollm2-135m-n64
step siqa-smollm2 --dataset socialiqa --model smollm2-135m --samples 64 --limit 500 --batch-size 16 \
  --out $RUNS/socialiqa-smollm2-135m-n64
# the exact-marginal classifier: certified brackets (1e-3 nats, at most 2000 forwards per answer)
step obqa-smollm2-exact --dataset openbookqa --model smollm2-135m --samples 64 --limit 500 --batch-size 16 \
  --scores exact --out $RUNS/openbookqa-smollm2-135m-n64
# Gemma-3-270M on OpenBookQA
step obqa-gemma --dataset openbookqa --model gemma3-270m --samples 64 --limit 500 --batch-size 8 \
  --out $RUNS/openbookqa-gemma3-270m-n64
step siqa-smollm2-exact --dataset socialiqa --model smollm2-135m --samples 64 --limit 500 --batch-size 16 \
  --scores exact --out $RUNS/socialiqa-smollm2-135m-n64
step hellaswag-smollm2 --dataset hellaswag --model smollm2-135m --samples 64 --limit 500 --batch-size 8 \
  --out $RUNS/hellaswag-smollm2-135m-n64
echo "$(date -u +%FT%TZ) all steps done" >> results/logs/study.log
