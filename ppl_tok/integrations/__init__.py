"""ppl-tok inside other tools: :mod:`ppl_tok.integrations.lm_eval` (lm-evaluation-harness).

Each integration needs its optional extra (``pip install "ppl-tok[lm-eval]"``)
and is imported on demand, never by ``import ppl_tok``.
"""
