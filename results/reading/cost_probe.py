"""CPU seconds of every focal-area predictor (one walk per text) against the word surprisal walk and the canonical
column, on the first 150 characters of Provo texts 11 and 12, SmolLM2, in one process (issue 59, item 4: a probe,
not the benchmark of all 55 texts). Run from the checkout's root: python results/reading/cost_probe.py"""

import json
import time

import torch

from ppl_tok.lm.cards import load_lm
from ppl_tok.reading.corpus import read_stimuli
from ppl_tok.reading.focal_surprisal import walk_events
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.surprisal import canonical_surprisals_many, surprisal_batch

torch.set_num_threads(1)
texts = [t[:150] for t in read_stimuli("../shared/data/reading/provo/stimuli.txt")[10:12]]
lm = load_lm("smollm2-135m")
config = StringSearchConfig(extend_threshold=1e-5)  # ppl-tok surprisal's and ppl-tok reading's default
out = {"texts": texts, "words": sum(len(t.split()) for t in texts)}
for name, run in [("canonical_word", lambda: canonical_surprisals_many(lm, texts)),
                  ("every_focal_area", lambda: walk_events(lm, texts, config=config)),
                  ("word_surprisal", lambda: surprisal_batch(lm, texts, config=config))]:
    c = time.process_time()
    run()
    out[f"{name}_cpu_s"] = time.process_time() - c
out["focal_over_word_surprisal"] = out["every_focal_area_cpu_s"] / out["word_surprisal_cpu_s"]
out["focal_over_canonical"] = out["every_focal_area_cpu_s"] / out["canonical_word_cpu_s"]
print(json.dumps(out, indent=1))
