"""Next-byte log-probs along a text: ppl-tok's byte-synchronous beam against genlm-bytes.

Both sides walk the same bytes ``x_1..x_n`` of a held-out text and record, for
each ``k``, ``log p(x_k | x_<k)``: the LM over strings' probability of the true
next byte. ppl-tok's side is :meth:`StringState.next_byte_log_probs` (an estimate
and a certified interval ``[lower_k, upper_k]``); genlm-bytes' side is
``ByteBeamState.logp_next`` (an estimate), run by :mod:`benchmarks.genlm_walk`
in genlm's own Python environment as a subprocess, so ``ppl_tok`` never imports
genlm.

**Error.** Against a reference walk ``r`` (ppl-tok with a wide beam: the
"certified value" where its interval is narrow), a walk ``m`` has

    excess bits per byte   =  (1 / (n ln 2)) * sum_k (r_k - m_k)         (signed: bits lost)
    mean |error| per byte  =  (1 / (n ln 2)) * sum_k |r_k - m_k|

``certified`` restricts both to the bytes where the reference's certified
interval is at most ``tolerance`` nats wide, so that the reference is itself
within ``tolerance`` of the exact value there. (The interval widens along a long
text: every pruned prefix's probability counts in it, and the text's own
probability falls below it; see docs/strings.md.)

**Containment.** Each estimate of ours should lie inside its certified
interval; the LM's rows are float32, so a figure counts as inside within
``FLOAT_SLACK`` nats (a softmax row's log-sum-exp differs from 0 by a few 1e-6).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.state import DeadEndError, StringState, cover_index

#: nats of float32 rounding allowed when checking that an estimate lies in its certified interval
FLOAT_SLACK = 1e-5
#: the standalone script run in genlm's environment
GENLM_SCRIPT = Path(__file__).with_name("genlm_walk.py")


@dataclass
class Walk:
    """``log p(x_k | x_<k)`` for the first ``len(log_probs)`` bytes of a text, and what it cost.

    ``seconds``: wall time; ``cpu_seconds``: the walking process's CPU time (the fairer
    clock on a shared machine). ``lower``/``upper``: certified bounds per byte (``None``
    for a walk without them).
    """

    name: str
    log_probs: list[float]
    seconds: float
    lower: list[float] | None = None
    upper: list[float] | None = None
    forwards: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    cpu_seconds: float | None = None

    @property
    def bytes_per_s(self) -> float:
        return len(self.log_probs) / self.seconds if self.seconds > 0 else math.inf

    @property
    def bytes_per_cpu_s(self) -> float | None:
        if self.cpu_seconds is None:
            return None
        return len(self.log_probs) / self.cpu_seconds if self.cpu_seconds > 0 else math.inf

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Walk:
        return cls(**data)


def walk_ours(lm: LanguageModel, text: bytes, config: StringSearchConfig, name: str | None = None) -> Walk:
    """ppl-tok's next-byte log-probs of ``text``'s bytes, each with its certified interval (timed).

    A dead end of pruning against the text is healed by the state (it revives the
    prefixes it dropped); the byte that hit it had no mass in the beam (its estimate
    was ``-inf``), so its figure is the healed mass over the mass before it,
    ``log P^(x b) - log P^(x)`` (inside its certified interval: ``P^(x b)`` is a mass
    found), and ``info["healed_bytes"]`` lists those bytes. A dead end that cannot be
    healed ends the walk there: the bytes walked are kept and ``info["error"]`` says where.
    """
    cover_index(lm.vocab)  # built once per vocabulary, outside the timing (as genlm's trie is)
    lm.clear_cache()
    start, cpu = time.perf_counter(), time.process_time()
    calls = lm.stats.calls
    state = StringState(lm, "", config)
    lps, lower, upper, error, k, healed = [], [], [], None, 0, []
    try:
        for k, b in enumerate(text):
            nb = state.next_byte_log_probs()
            lps.append(float(nb.log_probs[b]))
            lower.append(float(nb.lower[b]))
            upper.append(float(nb.upper[b]))
            heals = state.heals
            state.extend(b)
            if state.heals > heals and lps[-1] == -math.inf:
                lps[-1] = state.prefix_log_prob().estimate - nb.prefix.estimate
                healed.append(k)
    except DeadEndError as err:
        error = f"dead end at byte {k}: {str(err)[-120:]}"
        del lps[k:], lower[k:], upper[k:]  # the byte it could not spell has no figure
    secs, cpu = time.perf_counter() - start, time.process_time() - cpu
    against = "" if config.prune_against == "offset" else f" vs {config.prune_against}"
    return Walk(name or f"ppl-tok beam {config.beam}, prune {config.prune:g}{against}", lps, secs, lower, upper,
                state.forwards, {"beam": config.beam, "prune": config.prune, "prune_against": config.prune_against,
                                 "done": error is None, "error": error, "heals": state.heals,
                                 "healed_bytes": healed, "calls": lm.stats.calls - calls}, cpu)


def walk_known(lm: LanguageModel, text: bytes, config: StringSearchConfig, following: bytes = b" ",
               name: str | None = None) -> Walk:
    """The same figures as :func:`walk_ours` when the whole text is known in advance (timed): per-byte surprisal,
    :func:`~ppl_tok.strings.surprisal.surprisals` with ``units="byte"`` and no word-end correction.

    ``log p(x_k | x_<k)`` over strings with its certified interval, as in a walk; what differs is the
    schedule: the canonical tokens of the whole text run first in one forward, and the walk, which keeps the
    canonical path, reads their rows instead of running them one call each (docs/strings.md, "Many texts").
    A causal walk (next bytes not yet known, as in generation) cannot do this; scoring a given text can.
    ``following``: the character after ``text`` (the surprisal of a text's last unit is that of the text
    *and its end*; with ``following`` walked too and its unit dropped, the last byte's figure is the
    prefix conditional a walk gives).
    """
    from ppl_tok.strings.surprisal import surprisals

    cover_index(lm.vocab)
    lm.clear_cache()
    start, cpu = time.perf_counter(), time.process_time()
    forwards = lm.stats.forwards
    rows = surprisals(lm, (text + following).decode("utf-8"), units="byte", config=config,
                      word_end=False)[:len(text)]
    secs, cpu = time.perf_counter() - start, time.process_time() - cpu
    ln2 = math.log(2.0)
    against = "" if config.prune_against == "offset" else f" vs {config.prune_against}"
    return Walk(name or f"ppl-tok beam {config.beam}, prune {config.prune:g}{against}, text known",
                [-r.surprisal * ln2 for r in rows], secs, [-r.upper * ln2 for r in rows],
                [-r.lower * ln2 for r in rows],
                lm.stats.forwards - forwards,
                {"beam": config.beam, "prune": config.prune, "prune_against": config.prune_against, "done": True,
                 "error": None, "text_known": True}, cpu)


def causal_floor(lm: LanguageModel, text: bytes) -> dict[str, Any]:
    """What a causal walk of ``text`` cannot go below on this machine: one LM call per canonical token (timed).

    A causal walk must give ``p(next byte | x_<k)`` before it sees ``x_k``, so at each canonical token
    boundary it needs the row after that token, one LM call that it cannot share with the next (whose input
    token is not known yet). This runs exactly that and nothing else: the text's canonical tokens
    ``t_1..t_m``, one call each on top of the cached state before it (as a walk that already knew the
    tokenization would): the rows after BOS, ``t_1``, ..., ``t_{m-1}``, ``m`` calls, timed on this process's
    CPU clock. ``bytes_per_cpu_s`` over a walk's is the speed a
    causal walk could reach at most without drafting tokens before their prefix is scored.

    Drafting (speculation) would run ``t_{i+1}`` in the call for ``t_i``, so its guess must be made before
    the row after ``t_i`` exists: from an earlier call's row after a *guessed* ``t_i``. With the LM as its
    own drafter, a draft is right only where two consecutive greedy guesses are: ``top1_pairs`` is that
    share of the text's tokens (``top1``: the share where the LM's most probable next token is the text's).
    """
    lm.clear_cache()
    start, cpu, calls = time.perf_counter(), time.process_time(), lm.stats.calls
    tokens = lm.canonical(bytes(text).decode("utf-8"))
    state = lm.initial("")
    hits = []
    for k, t in enumerate(tokens):
        hits.append(int(state.log_probs.argmax()) == int(t))
        if k + 1 < len(tokens):  # the row after the last token is not needed for the text's own bytes
            state = lm.extend([state], [int(t)])[0]
    secs, cpu, calls = time.perf_counter() - start, time.process_time() - cpu, lm.stats.calls - calls
    pairs = [a and b for a, b in zip(hits, hits[1:])]
    return {"bytes": len(text), "canonical_tokens": len(tokens), "calls": calls, "seconds": secs,
            "cpu_seconds": cpu, "bytes_per_cpu_s": len(text) / cpu if cpu > 0 else math.inf,
            "cpu_ms_per_call": 1e3 * cpu / calls if calls else None,
            "top1": sum(hits) / len(hits) if hits else None,
            "top1_pairs": sum(pairs) / len(pairs) if pairs else None}


def run_genlm(python: str | Path, lm: LanguageModel, text: bytes, K: int, prune_threshold: float = 0.05,
              threads: int = 1, timeout: float | None = None, keep: str | Path | None = None) -> Walk:
    """genlm-bytes' walk along ``text`` with ``BeamParams(K, prune_threshold)``, in the interpreter ``python``.

    The model is the transformers folder ``lm`` was loaded from, after ``lm``'s BOS id; the
    special tokens (no surface in ``lm.vocab``) are genlm's EOS strings. ``keep``: a path
    for genlm's JSON result (default: a temporary file). A run that stops early keeps the
    bytes it walked (``info["error"]``).
    """
    folder = getattr(getattr(lm, "model", None), "name_or_path", None)
    if not folder or not Path(folder, "config.json").is_file():
        raise ValueError(f"genlm-bytes needs the LM as a transformers folder; {lm.vocab.name} was not loaded from "
                         "one (load it with ppl_tok.lm.cards.load_lm from a card or a folder)")
    job = {"model_dir": str(folder), "bos_id": lm.prefix_ids("")[0], "text_hex": bytes(text).hex(), "K": K,
           "prune_threshold": prune_threshold, "eos_ids": sorted(lm.vocab.special_ids), "threads": threads}
    with tempfile.TemporaryDirectory() as tmp:
        job_path = Path(tmp, "job.json")
        job_path.write_text(json.dumps(job), encoding="utf-8")
        out = Path(keep) if keep else Path(tmp, "out.json")
        env_threads = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        proc = subprocess.run([str(python), str(GENLM_SCRIPT), str(job_path), str(out)], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, **env_threads})
        if not out.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"genlm-bytes ({python}) gave no result (exit {proc.returncode}): " + " | ".join(tail))
        return genlm_walk_from_json(json.loads(out.read_text(encoding="utf-8")))


def genlm_walk_from_json(data: dict[str, Any]) -> Walk:
    """A :class:`Walk` from :mod:`~benchmarks.genlm_walk`'s JSON (validated: finite log-probs, at most 0)."""
    for key in ("K", "prune_threshold", "log_probs", "seconds"):
        if key not in data:
            raise ValueError(f"genlm-bytes result has no {key!r}")
    lps = [float(v) for v in data["log_probs"]]
    bad = [k for k, v in enumerate(lps) if not (v <= 1e-6)]  # NaN, +inf or a probability above one
    if bad:
        raise ValueError(f"genlm-bytes result: log p(next byte) = {lps[bad[0]]} at byte {bad[0]}")
    info = {k: data.get(k) for k in ("setup_seconds", "versions", "done", "error")}
    cpu = data.get("cpu_seconds")
    return Walk(f"genlm-bytes K={data['K']}, prune_threshold {data['prune_threshold']:g}", lps,
                float(data["seconds"]), info={"K": data["K"], "prune_threshold": data["prune_threshold"], **info},
                cpu_seconds=None if cpu is None else float(cpu))


def _inside(x: float, lo: float, hi: float) -> bool:
    return lo - FLOAT_SLACK <= x <= hi + FLOAT_SLACK


def compare(reference: Walk, walks: Sequence[Walk], tolerance: float = 1e-3) -> dict[str, Any]:
    """Each walk's error against ``reference`` (which must have bounds) and its containment.

    Errors are over the bytes both walked, leaving out (and listing in
    ``zero_probability_bytes``) those the walk gave probability 0: an infinite error
    each, which a mean would hide. ``certified_bytes``: where the reference's interval
    is at most ``tolerance`` nats wide.
    """
    if reference.lower is None or reference.upper is None:
        raise ValueError(f"the reference walk {reference.name!r} has no certified bounds")
    width = [u - lo for lo, u in zip(reference.lower, reference.upper)]
    tight = [w <= tolerance for w in width]
    ln2 = math.log(2)
    out: dict[str, Any] = {
        "reference": reference.name, "bytes": len(reference.log_probs), "tolerance": tolerance,
        "reference_bytes_per_s": reference.bytes_per_s, "reference_bytes_per_cpu_s": reference.bytes_per_cpu_s,
        "certified_bytes": sum(tight),
        "first_uncertified_byte": next((k for k, t in enumerate(tight) if not t), None),
        "reference_median_width": sorted(width)[len(width) // 2] if width else math.nan,
        "reference_inside_own_interval": all(_inside(x, lo, hi) for x, lo, hi in
                                             zip(reference.log_probs, reference.lower, reference.upper)),
        "walks": []}
    for w in walks:
        n = min(len(w.log_probs), len(reference.log_probs))
        if n == 0:
            raise ValueError(f"walk {w.name!r} has no bytes")
        zero = [k for k in range(n) if w.log_probs[k] == -math.inf]  # the walk gave the true byte probability 0
        finite = [k for k in range(n) if w.log_probs[k] > -math.inf]
        diff = [reference.log_probs[k] - w.log_probs[k] for k in finite]
        cert = [reference.log_probs[k] - w.log_probs[k] for k in finite if tight[k]]
        row: dict[str, Any] = {
            "name": w.name, "bytes": n, "seconds": w.seconds, "bytes_per_s": w.bytes_per_s,
            "cpu_seconds": w.cpu_seconds, "bytes_per_cpu_s": w.bytes_per_cpu_s,
            "zero_probability_bytes": zero,
            "excess_bits_per_byte": sum(diff) / (len(diff) * ln2) if diff else None,
            "mean_abs_error_bits_per_byte": sum(map(abs, diff)) / (len(diff) * ln2) if diff else None,
            "max_abs_error_nats": max(map(abs, diff)) if diff else None,
            "certified_excess_bits_per_byte": sum(cert) / (len(cert) * ln2) if cert else None,
            "certified_mean_abs_error_bits_per_byte": sum(map(abs, cert)) / (len(cert) * ln2) if cert else None,
            "inside_reference_interval": sum(_inside(w.log_probs[k], reference.lower[k], reference.upper[k])
                                             for k in range(n)),
            "forwards": w.forwards, **{k: v for k, v in w.info.items() if k in ("K", "prune_threshold", "beam",
                                                                               "prune", "error", "done", "heals",
                                                                               "calls")}}
        if w.lower is not None and w.upper is not None:
            row["inside_own_interval"] = sum(_inside(x, lo, hi) for x, lo, hi in
                                             zip(w.log_probs[:n], w.lower[:n], w.upper[:n]))
        out["walks"].append(row)
    return out


def speed_ratios(summary: dict[str, Any], ours: str, theirs: str, clock: str = "bytes_per_s") -> float:
    """Bytes per second of walk ``ours`` over walk ``theirs`` (names as in ``summary``).

    ``clock``: ``bytes_per_s`` (wall) or ``bytes_per_cpu_s`` (CPU time of each walk's process).
    """
    rate = {w["name"]: w[clock] for w in summary["walks"]}
    for name in (ours, theirs):
        if name not in rate:
            raise KeyError(f"no walk named {name!r} (have {sorted(rate)})")
    return rate[ours] / rate[theirs]


def genlm_available(python: str | Path) -> str | None:
    """``None`` if ``python`` imports genlm.bytes, else why not (one line)."""
    try:
        proc = subprocess.run([str(python), "-c", "import genlm.bytes, genlm.backend.llm"], capture_output=True,
                              text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{python}: {err}"
    if proc.returncode:
        return f"{python}: " + ((proc.stderr.strip().splitlines() or ["import failed"])[-1])
    return None


__all__ = ["FLOAT_SLACK", "Walk", "walk_ours", "causal_floor", "run_genlm", "genlm_walk_from_json", "compare",
           "speed_ratios", "genlm_available"]
