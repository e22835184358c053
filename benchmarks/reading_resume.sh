#!/bin/bash
# The reading study end to end on a tiny Provo corpus (issue 59, item 3): an uninterrupted run, then a run killed
# (SIGKILL, by its pid) once its first text is stored and resumed; the resumed run's files must equal the
# uninterrupted run's. The corpus: Provo texts 1-3 cut to their first 16 words, their measurement rows with a word
# index under 16 (44 rows). SmolLM2, --batch-size 1 --limit 3 --folds 5 --repeats 2, under nice -n 10.
# Usage, from the checkout's root: benchmarks/reading_resume.sh [OUT_DIR (default /tmp/reading-resume)]
# Prints the wall seconds of each run and one line per compared file; writes OUT_DIR/status.
set -u
OUT=${1:-/tmp/reading-resume}
PROVO=$(dirname "$PWD")/shared/data/reading/provo
PYTHON=${PYTHON:-/work/main/.venv/bin/python}
rm -rf "$OUT" && mkdir -p "$OUT"
"$PYTHON" - "$PROVO" "$OUT" <<'PY'
import csv, sys
provo, out = sys.argv[1:]
texts = open(f"{provo}/stimuli.txt").read().splitlines()[:3]
open(f"{out}/stimuli.txt", "w").write("\n".join(" ".join(t.split(" ")[:16]) for t in texts) + "\n")
rows = list(csv.DictReader(open(f"{provo}/measurements.csv")))
with open(f"{out}/measurements.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(r for r in rows if int(r["StimulusID"]) <= 3 and int(r["ContextLength"]) < 16)
PY
RUN=(nice -n 10 env PYTHONPATH="$PWD" "$PYTHON" -m ppl_tok.cli reading run --stimuli "$OUT/stimuli.txt"
     --measurements "$OUT/measurements.csv" --model smollm2-135m --folds 5 --repeats 2 --batch-size 1 --limit 3)
s=$(date +%s); "${RUN[@]}" --out "$OUT/whole" > "$OUT/whole.log" 2>&1
echo "uninterrupted: rc=$? wall_s=$(( $(date +%s) - s ))" | tee -a "$OUT/status"
s=$(date +%s); "${RUN[@]}" --out "$OUT/killed" > "$OUT/killed.log" 2>&1 &
pid=$!  # nice and env exec: this is the study's python
while [ ! -s "$OUT/killed/events.jsonl" ]; do sleep 1; done
kill -KILL $pid; wait $pid 2>/dev/null
echo "killed: after $(wc -l < "$OUT/killed/events.jsonl") stored text(s), wall_s=$(( $(date +%s) - s ))" | tee -a "$OUT/status"
s=$(date +%s); "${RUN[@]}" --out "$OUT/killed" > "$OUT/resumed.log" 2>&1
echo "resumed: rc=$? wall_s=$(( $(date +%s) - s )); $(grep -c walked "$OUT/resumed.log") text(s) walked" | tee -a "$OUT/status"
for f in predictors.csv summary.csv folds.csv corrections.csv report.json; do
    if cmp -s "$OUT/whole/$f" "$OUT/killed/$f"; then echo "$f: equal"; else echo "$f: DIFFERS"; fi | tee -a "$OUT/status"
done
