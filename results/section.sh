#!/usr/bin/env bash
# Print a run's report as a section body of docs/results.md and copy its plots to docs/figures/results/.
# Usage: results/section.sh RUN_DIR SLUG   (after `ppl-tok qa report RUN_DIR`; SLUG names the figures)
set -euo pipefail
cd "$(dirname "$0")/.."
run=$1; slug=$2
for fig in fig5-choose-k fig6-mixture; do cp "$run/$fig.png" "docs/figures/results/$slug-$fig.png"; done
# the report without its title, headings one level down, figure links into docs/figures/results/
tail -n +2 "$run/report.md" | sed -e 's/^## /### /' -e "s#](fig\([56]\)-#](figures/results/$slug-fig\1-#"
