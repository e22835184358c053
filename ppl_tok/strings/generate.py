"""Generation from the LM over strings, byte by byte, from a prompt string.

Each step draws the next byte (or the end of the string) from the beam's
next-byte distribution :meth:`~ppl_tok.strings.state.StringState.next_byte_log_probs`,
tempered and truncated to its top-p nucleus, by inverse CDF at a seeded uniform
(:class:`ppl_tok.distributions.OverCandidates`, the one inverse-CDF sampler of
ppl-tok), then extends the state by it. The prompt is summed over all its
tokenizations, so a prompt that ends inside a token ("https://www.goo") is
continued as the LM would continue the string, not the canonical tokens.
Under ``config.prefill`` ``canonical-head`` the prompt's canonical head is run in
one prefill forward and the continuation is drawn from the LM over strings
conditioned on "the head is tokenized canonically" (:mod:`ppl_tok.strings.prefill`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm import tqdm

from ppl_tok.distributions import OverCandidates
from ppl_tok.limits import check_seed, limits
from ppl_tok.lm.base import LanguageModel, model_window
from ppl_tok.strings.beam import ContextLengthError, StringSearchConfig
from ppl_tok.strings.certified import tolerance
from ppl_tok.strings.ensemble import Ensemble
from ppl_tok.strings.state import END_OF_STRING, StringState


@dataclass(frozen=True)
class Generation:
    """A generated continuation.

    :param data: the bytes drawn (a stop string, if one ended the run, excluded).
    :param log_probs: ``log p(b | prompt, bytes before)`` of each byte drawn, under the
        (untempered) estimate of the next-byte distribution.
    :param stopped: ``"end"`` (the LM ended the string), ``"stop"`` (a stop string) or ``"max-bytes"``.
    :param forwards: token positions run through the LM (the prompt's included).
    :param mode: ``"bytes"`` (byte by byte) or ``"tokens"`` (a covering of the prompt, then
        plain token sampling: ``log_probs`` is then empty).
    :param log_prob_lower: tokens mode: a certified lower bound on ``log p(text | prompt)`` over
        strings (as a prefix): the sampled covering and tokens ``h t v`` spell a string that starts
        with prompt and text, so ``P(prompt text) >= p(h t v)`` and
        ``log p(text | prompt) >= log p(h t v) - log P^+(prompt) - tolerance``.
    :param tokens_log_prob: tokens mode: ``log p(h t v | context)``, the sampled tokens' own log-probability.
    """

    prompt: str
    data: bytes
    log_probs: list[float]
    stopped: str
    forwards: int
    seconds: float
    mode: str = "bytes"
    log_prob_lower: float | None = None
    tokens_log_prob: float | None = None

    @property
    def log_prob(self) -> float | None:
        """Bytes mode: ``log p(text | prompt)``, the sum of :attr:`log_probs` (``None`` in tokens mode)."""
        return sum(self.log_probs) if self.mode == "bytes" else None

    @property
    def text(self) -> str:
        """The bytes drawn as text (invalid UTF-8, e.g. a character cut by ``max_bytes``, as U+FFFD)."""
        return self.data.decode("utf-8", errors="replace")

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "text": self.text, "bytes": len(self.data), "mode": self.mode,
                "log_prob": self.log_prob, "log_prob_lower": self.log_prob_lower,
                "tokens_log_prob": self.tokens_log_prob, "stopped": self.stopped, "forwards": self.forwards,
                "seconds": self.seconds, "bytes_per_second": len(self.data) / self.seconds if self.seconds > 0 else None}


def nucleus(log_probs: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """``log_probs`` tempered (divided by ``temperature``), cut to the smallest set holding ``top_p`` of the mass,
    renormalised."""
    logits = log_probs / temperature
    logits = logits - torch.logsumexp(logits, 0)
    if top_p < 1.0:
        order = torch.argsort(logits, descending=True)
        mass = logits[order].exp().cumsum(0)
        drop = order[(mass - logits[order].exp()) >= top_p]  # entries after the nucleus is full
        logits = logits.clone()
        logits[drop] = -math.inf
    return logits - torch.logsumexp(logits, 0)


def check_sampling(max_bytes: int, temperature: float, top_p: float, stop: str | Sequence[str]) -> list[bytes]:
    """Validate the sampling arguments of :func:`generate` (``max_bytes`` within the ``generated_bytes``
    limit, :mod:`ppl_tok.limits`); the stop strings as bytes."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes must be a positive integer, got {max_bytes!r}")
    limits().check("generated_bytes", max_bytes, "the most bytes generated (max_bytes, --max-bytes)")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    if not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if isinstance(stop, (str, bytes)):  # one stop string, not one per character
        stop = [stop]
    bad = [s for s in stop if not isinstance(s, (str, bytes))]
    if bad:
        raise TypeError(f"stop strings must be str or bytes, got {bad[0]!r} ({type(bad[0]).__name__})")
    stops = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in stop]
    if any(not s for s in stops):
        raise ValueError("a stop string must not be empty")
    return stops


MODES = ("auto", "bytes", "tokens")


def sampling_mode(mode: str, temperature: float, top_p: float, greedy: bool, ensemble: bool = False) -> str:
    """``"bytes"`` or ``"tokens"`` for :func:`generate`'s ``mode`` (validated)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    plain = temperature == 1.0 and top_p == 1.0 and not greedy and not ensemble
    if mode == "tokens" and not plain:
        raise ValueError("mode 'tokens' samples the LM as it is: no temperature, top-p, greedy or ensemble "
                         "(use mode 'bytes')")
    return ("tokens" if plain else "bytes") if mode == "auto" else mode


def _first_stop(data: bytes | bytearray, stops: list[bytes]) -> int:
    """The offset of the earliest stop string in ``data`` (-1: none)."""
    hits = [data.find(s) for s in stops]
    return min((h for h in hits if h >= 0), default=-1)


def _sample_tokens(state: StringState, max_bytes: int, stops: list[bytes], rng: torch.Generator,
                   bar: tqdm) -> tuple[bytes, str, int, float, int]:
    """A covering of the prompt (:meth:`StringState.sample_covering`), then the LM's own tokens.

    Returns the bytes, why it stopped, the forwards, ``log p(h t v | c)`` of the tokens drawn and
    the number of rows it rests on. A token is run only to sample what follows it; one that would
    take a position past the model's context window raises :class:`ContextLengthError`, as the
    byte walk does.
    """
    lm, window = state.lm, model_window(state.lm)
    hyp, pending, offset = state.sample_covering(torch.rand(2, generator=rng, dtype=torch.float64))
    out, lm_state, forwards = bytearray(), hyp.state, 0
    log_p, rows = hyp.log_prob, len(state.head.ids) + len(hyp.tokens()) + 1
    if pending is not None:
        out += lm.vocab[pending][len(state.data) - offset:]
        log_p += float(lm_state.log_probs[pending])
    while True:
        cut = _first_stop(out[:max_bytes], stops)
        if cut >= 0:
            return bytes(out[:cut]), "stop", forwards, log_p, rows
        if len(out) >= max_bytes:
            return bytes(out[:max_bytes]), "max-bytes", forwards, log_p, rows
        if pending is not None:
            if window is not None and len(lm_state.tokens) + 1 > window:
                raise ContextLengthError(f"generation reached {lm.name}'s context window of {window} token "
                                         f"positions after {len(out)} bytes: lower the most bytes generated "
                                         "(max_bytes, --max-bytes) or shorten the prompt")
            lm_state, forwards, rows = lm.extend([lm_state], [pending])[0], forwards + 1, rows + 1
        t = int(lm.sample_tokens([lm_state], torch.rand(1, generator=rng, dtype=torch.float64))[0])
        surface = lm.vocab[t]
        if surface is None:
            return bytes(out), "end", forwards, log_p, rows
        out += surface
        log_p += float(lm_state.log_probs[t])
        pending = t
        bar.update(min(len(out), max_bytes) - bar.n)


def generate(lm: LanguageModel | StringState | Ensemble, prompt: str = "", max_bytes: int = 64, *, temperature: float = 1.0,
             top_p: float = 1.0, greedy: bool = False, seed: int = 0, stop: str | Sequence[str] = (),
             context: str | Sequence[int] = "", config: StringSearchConfig | None = None,
             progress: bool | None = None, mode: str = "auto") -> Generation:
    """Sample (or, with ``greedy``, decode) up to ``max_bytes`` bytes after ``prompt`` from the LM over strings.

    ``lm`` may also be a :class:`StringState` or an :class:`~ppl_tok.strings.ensemble.Ensemble`
    (walked in place, ``prompt`` appended to what it was fed).
    :param stop: a string, or strings, that end the generation (excluded from the result).
    :param progress: show a progress bar (``None``: on a terminal).
    :param mode: ``"bytes"``: each byte from :meth:`StringState.next_byte_log_probs` (one batched
        forward per byte); ``"tokens"``: draw a covering of the prompt with its probability, then
        sample tokens from the LM as usual. Both sample the same distribution over continuations
        (the covering decomposition; exact when the beam prunes nothing), and the second runs
        one forward per token. Temperature, top-p and greedy act on bytes, so they need
        ``"bytes"``; ``"auto"`` takes ``"tokens"`` whenever it applies.
    """
    stops = check_sampling(max_bytes, temperature, top_p, stop)
    mode = sampling_mode(mode, temperature, top_p, greedy, isinstance(lm, Ensemble))
    start = time.perf_counter()
    if isinstance(lm, LanguageModel):
        state: StringState | Ensemble = StringState(lm, context, config, prompt=prompt)
    else:
        if config is not None or context:
            raise ValueError("config and context belong to a new state: give them when building the state")
        state = lm.extend(prompt)
    rng = torch.Generator().manual_seed(check_seed("seed", seed))
    out, lps, stopped = bytearray(), [], "max-bytes"
    candidates = [list(range(END_OF_STRING + 1))]
    with tqdm(total=max_bytes, desc="generating", unit="B", disable=(not progress) if progress is not None else None,
              leave=False) as bar:
        if mode == "tokens":
            prompt_bracket = state.prefix_log_prob()
            data, stopped, forwards, log_p, n = _sample_tokens(state, max_bytes, stops, rng, bar)
            lower = log_p - prompt_bracket.upper - tolerance(state.beam.dtype, n, len(state.lm.vocab))
            return Generation(prompt=prompt, data=data, log_probs=[], stopped=stopped,
                              forwards=state.forwards + forwards, seconds=time.perf_counter() - start, mode=mode,
                              log_prob_lower=min(lower, 0.0), tokens_log_prob=log_p)
        for _ in range(max_bytes):
            dist = state.next_byte_log_probs()
            dist = dist if isinstance(dist, torch.Tensor) else dist.log_probs
            if greedy:
                b = int(torch.argmax(dist))
            else:
                u = torch.rand(1, generator=rng, dtype=torch.float64)
                b = int(OverCandidates.from_lists(candidates, [nucleus(dist, temperature, top_p)], uniforms=u).sample())
            if b == END_OF_STRING:
                stopped = "end"
                break
            out.append(b)
            lps.append(float(dist[b]))
            bar.update(1)
            hit = next((s for s in stops if out.endswith(s)), None)
            if hit is not None:
                del out[len(out) - len(hit):]
                del lps[len(lps) - len(hit):]
                stopped = "stop"
                break
            state.extend(b)
    return Generation(prompt=prompt, data=bytes(out), log_probs=lps, stopped=stopped, forwards=state.forwards,
                      seconds=time.perf_counter() - start)
