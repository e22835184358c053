#!/usr/bin/env bash
# The QA study's per-question score files (results/runs/*/scores.jsonl, 17-76 MB each) left the working tree so that
# no tracked file is over 1 MB (a clone no longer checks out 136 MB of run records). They are kept in the history:
# this script writes them back from the last commit that held them, so `ppl-tok qa summary`, `ppl-tok qa report` and
# results/exact_vs_estimates.py run on them as before. Usage: results/restore-scores.sh   (needs a full clone, not a
# shallow one). Restored files are ignored by git (.gitignore). Regenerating them instead: results/study.sh (hours).
set -euo pipefail
cd "$(dirname "$0")/.."
COMMIT=d0665bf
for run in hellaswag-smollm2-135m-n64 openbookqa-gemma3-270m-n64 openbookqa-smollm2-135m-n64 socialiqa-smollm2-135m-n64; do
  path=results/runs/$run/scores.jsonl
  if [[ -s $path ]]; then echo "kept    $path (already there)"; continue; fi
  git cat-file -e "$COMMIT:$path" 2>/dev/null || { echo "$path: commit $COMMIT is not in this clone (a shallow clone?): git fetch --unshallow, then run this again" >&2; exit 1; }
  git show "$COMMIT:$path" > "$path.tmp" && mv "$path.tmp" "$path"
  echo "restored $path ($(wc -l < "$path") records)"
done
