"""The lm-eval model's answers over strings: ``scoring=conditional`` and ``generate_until``.

Both use the LM over strings (:mod:`ppl_tok.strings`), so neither sees a prompt boundary:

* ``conditional`` scores a (context, continuation) request as

      log p(y | x) = log P(x y) - log P(x),

  ``P`` the prefix probability over strings (every tokenization of the context ``x`` and of
  ``x y``, tokens allowed to span the join), the context conditioned on as the model
  argument ``prefill`` says (default ``canonical-head``: the context's canonical head in one
  prefill forward, the last word or two walked exactly; ``exact``: all of it walked;
  :mod:`ppl_tok.strings.prefill`). The context's trailing whitespace moves to the
  continuation first (:func:`~ppl_tok.integrations.lm_eval.move_trailing_space`), so the
  score is the same wherever ``target_delimiter`` or a trailing space sits; the tokenizer's
  ``add_prefix_space`` plays no part (no string is tokenized apart). The continuation is
  never empty of tokens: a token that spans the join counts toward it with the share of its
  bytes that the string asks for. Each request's certified interval
  ``lower <= log p(y | x) <= upper`` (:class:`~ppl_tok.strings.conditional.StringConditional`)
  is logged (logger ``ppl_tok.integrations.lm_eval_strings``, level INFO) and kept in
  :attr:`~ppl_tok.integrations.lm_eval.PPLTokLM.intervals`.
* ``generate_until`` draws the continuation of the context as a string
  (:func:`ppl_tok.strings.generate.generate`): greedy (``do_sample`` false or
  ``temperature`` 0, byte by byte) or sampled (tokens mode after a sampled covering of the
  context when ``temperature`` is 1 and ``top_p`` 1, else byte by byte), ending at the first
  ``until`` string (left out of the answer, as lm-eval's ``hf``) or at a budget of
  ``max_gen_toks x gen_bytes_per_token`` **bytes** (the model argument, default
  :data:`BYTES_PER_TOKEN`), since a string has no tokens of its own.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from ppl_tok.common.seeds import pair_seed
from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.conditional import CONDITIONAL_EXTEND_THRESHOLD

LOG = logging.getLogger(__name__)

#: bytes of the generation budget per token of ``max_gen_toks`` (English text runs at about 4 bytes per token
#: under the bundled tokenizers)
BYTES_PER_TOKEN = 4
#: ``conditional``'s lazy extension by default (the model argument ``extend_threshold``)
EXTEND_THRESHOLD = CONDITIONAL_EXTEND_THRESHOLD
#: lm-eval's default ``max_gen_toks``
DEFAULT_GEN_TOKS = 256
#: the ``gen_kwargs`` keys :func:`generation_settings` reads (any other is an error)
GEN_KEYS = ("until", "max_gen_toks", "do_sample", "temperature", "top_p")


def generation_settings(gen_kwargs: dict[str, Any], bytes_per_token: int) -> dict[str, Any]:
    """:func:`~ppl_tok.strings.generate.generate`'s keyword arguments from lm-eval's ``gen_kwargs``.

    ``until`` (a string or a list; default none), ``max_gen_toks`` (default 256) times
    ``bytes_per_token`` as ``max_bytes``, ``do_sample`` (default false: greedy), ``temperature``
    (0: greedy) and ``top_p``.

    :raises ValueError: an unknown key or a bad value, named.
    """
    unknown = sorted(set(gen_kwargs) - set(GEN_KEYS))
    if unknown:
        raise ValueError(f"generate_until: unsupported gen_kwargs {', '.join(map(repr, unknown))}: ppl-tok reads "
                         f"{', '.join(GEN_KEYS)}; remove the others from the task's generation_kwargs")
    until = gen_kwargs.get("until") or []
    until = [until] if isinstance(until, str) else list(until)
    toks = gen_kwargs.get("max_gen_toks", DEFAULT_GEN_TOKS)
    if isinstance(toks, bool) or not isinstance(toks, int) or toks < 1:
        raise ValueError(f"generate_until: max_gen_toks must be a positive integer, got {toks!r}")
    temperature = float(gen_kwargs.get("temperature", 1.0))
    top_p = float(gen_kwargs.get("top_p", 1.0))
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"generate_until: temperature must be a finite number >= 0, got {temperature!r}")
    greedy = not gen_kwargs.get("do_sample", False) or temperature == 0
    settings: dict[str, Any] = {"max_bytes": toks * bytes_per_token, "stop": until, "greedy": greedy}
    if greedy:
        settings["mode"] = "bytes"
    else:
        settings.update(temperature=temperature, top_p=top_p)
    return settings


def generate_until(lm: LanguageModel, requests: Sequence[Any], config: StringSearchConfig, *, seed: int,
                   bytes_per_token: int = BYTES_PER_TOKEN, progress: bool = False) -> list[str]:
    """The continuation of each lm-eval ``generate_until`` request (``args = (context, gen_kwargs)``).

    Request (document ``d``, index ``i``) draws with the seed ``pair_seed(seed, "generate", d, i)``
    (:mod:`ppl_tok.common.seeds`), so an answer depends on the run's seed and the request only.
    """
    from tqdm.auto import tqdm

    from ppl_tok.strings.generate import generate

    settings = [generation_settings(dict(r.args[1]) if len(r.args) > 1 else {}, bytes_per_token) for r in requests]
    out = []
    for r, kw in tqdm(list(zip(requests, settings)), desc="ppl-tok generate_until", unit="req", disable=not progress):
        g = generate(lm, str(r.args[0]), config=config, seed=pair_seed(seed, "generate", str(r.doc_id), int(r.idx)),
                     progress=False, **kw)
        LOG.info("request %s: %d bytes generated (%s)", (r.task_name, r.doc_id), len(g.data), g.stopped)
        out.append(g.text)
    return out


__all__ = ["BYTES_PER_TOKEN", "EXTEND_THRESHOLD", "generate_until", "generation_settings"]
