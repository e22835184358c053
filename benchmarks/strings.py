"""``python -m benchmarks strings``: the byte-synchronous beam's cost per byte and accuracy, in one process.

* **Length**: :func:`~ppl_tok.strings.string_marginal` on the HellaSwag sentence
  of issue 25 (its first 58 and 101 bytes) and on a longer running text built
  from HellaSwag contexts: token forwards and seconds per byte (flat in the
  length means the beam works), the bracket, the canonical floor, and the gap
  of the mass found to a run with a 10x wider beam.
* **Against best-first**: the bracket of :func:`ppl_tok.infer.search.marginal_bounds`
  given the same number of forwards as the beam used, on the same strings.
* **Exact**: on a short string, the beam's bracket against exact enumeration.
* **Generation**: bytes/s of string-level sampling against plain token sampling
  of the same model (ratio, same process).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ppl_tok.common.bootstrap import bootstrap_mean
from ppl_tok.common.jsonl_store import JsonlStore, decode_log, encode_log
from ppl_tok.datasets import DATA_ROOT
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.marginal import string_marginal

#: The sentence on which the best-first bracket does not scale (issue 25), at two lengths.
HELLASWAG = (" The male athlete is standing by the two poles, raised his arms up, then jumped on the poles with his "
             "arms, while under him, a man pull out a red beam.")
SHORT = (" The male athlete is standing by the two poles, raised his", HELLASWAG[:101])
EXACT_STRING = " tongueless"  # 597 tokenizations on SmolLM2


#: the held-out split whose contexts make a running text, by task (:func:`ppl_tok.datasets.data_file`)
RUNNING_TEXT_SPLITS = {"hellaswag": "val", "openbookqa": "test"}


def running_text(data: str | Path, n_bytes: int, task: str = "hellaswag") -> str:
    """The task's contexts joined by spaces, cut to at most ``n_bytes`` UTF-8 bytes (at a character boundary).

    ``task``: ``hellaswag`` (validation contexts) or ``openbookqa`` (test question stems).
    """
    from ppl_tok.datasets import DatasetError, data_file, load_questions

    path = Path(data)
    if path.is_dir():
        path = data_file(task, RUNNING_TEXT_SPLITS[task], path)
        if not path.is_file():
            raise DatasetError(f"{data}: no {task} file here ({path}; give --data-dir a data folder)")
    out, size = [], 0
    for q in load_questions(path):
        out.append(" " + q.context)
        size += len(out[-1].encode())
        if size >= n_bytes:
            break
    return "".join(out).encode()[:n_bytes].decode("utf-8", errors="ignore")


def mid_word_prompts(data: str | Path, n: int, seed: int = 0, continuation: int = 12) -> list[tuple[str, str]]:
    """``n`` (prompt, continuation) pairs cut inside a word of OpenBookQA test questions (seeded).

    The cut falls between two letters; the continuation is the next ``continuation`` characters.
    """
    import random

    from ppl_tok.datasets import data_file, load_questions

    path = Path(data)
    path = data_file("openbookqa", "test", path) if path.is_dir() else path
    rng = random.Random(seed)
    out = []
    for q in load_questions(path):
        text = q.context
        cuts = [i for i in range(1, len(text) - continuation) if text[i - 1].isalpha() and text[i].isalpha()]
        if cuts:
            i = rng.choice(cuts)
            out.append((text[:i], text[i:i + continuation]))
        if len(out) == n:
            break
    return out


class PromptRecords(JsonlStore):
    """:func:`prompt_boundary`'s records file: one line per prompt, in the order of the prompts (not keyed)."""

    record_name = "prompt record"
    unique_keys = False

    @staticmethod
    def key(record: dict[str, Any]) -> tuple[str, str]:
        return record["prompt"], record["continuation"]


def prompt_boundary(lm, pairs: list[tuple[str, str]], config: StringSearchConfig,
                    records: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """String-level minus canonical-token ``log p(continuation | prompt)`` over ``pairs``, with a bootstrap interval.

    :param records: a JSON Lines file (:class:`PromptRecords`): one line per prompt is appended (written and
        synced) as it is computed, and the prompts already there are read back instead of computed again, so a
        killed run resumes; a line whose prompt or continuation differs from ``pairs`` is an error.
    """
    from ppl_tok.strings.conditional import string_conditional

    store = PromptRecords.open_file(records) if records is not None else None
    try:
        done = store.records if store is not None else []
        for n, (row, (prompt, cont)) in enumerate(zip(done, pairs), 1):
            if (row.get("prompt"), row.get("continuation")) != (prompt, cont):
                raise ValueError(f"{records}:{n}: holds the prompt {row.get('prompt')!r} + "
                                 f"{row.get('continuation')!r}, not {prompt!r} + {cont!r}: another benchmark's "
                                 "records (give another file)")
        rows = list(done[:len(pairs)])
        for prompt, cont in tqdm(pairs[len(rows):], desc="mid-word prompts", leave=False, disable=not progress):
            r = string_conditional(lm, prompt, cont, config=config, event="prefix")  # its stored records' event
            row = {"prompt": prompt, "continuation": cont, "estimate": encode_log(r.estimate),
                   "lower": encode_log(r.lower), "upper": encode_log(r.upper),
                   "canonical": encode_log(lm.canonical_log_prob(cont, prompt)), "forwards": r.forwards}
            rows.append(row)
            if store is not None:
                store.append([row])
    finally:
        if store is not None:
            store.close()
    gains = [decode_log(r["estimate"]) - decode_log(r["canonical"]) for r in rows]
    floors = [decode_log(r["lower"]) - decode_log(r["canonical"]) for r in rows]
    mean, lo, hi = bootstrap_mean(gains)
    return {"prompts": len(rows), "mean_gain": mean, "ci95": [lo, hi],
            "median_gain": float(torch.tensor(gains).median()), "mean_certified_gain": sum(floors) / len(floors),
            "share_gain_positive": sum(g > 0 for g in gains) / len(gains)}


def _run(lm, fn) -> tuple[Any, int, float]:
    lm.clear_cache()
    lm.stats.reset()
    start = time.perf_counter()
    result = fn()
    return result, lm.stats.forwards, time.perf_counter() - start


def bench_strings(model: str = "smollm2-135m", beam: int = StringSearchConfig.beam,
                  data: str | Path = DATA_ROOT,
                  long_bytes: int = 2000, wide_long: bool = False, generate_bytes: int = 200, prompts: int = 50,
                  device: str | None = None, dtype: str | None = None, bos_id: int | None = None,
                  prompt_records: str | Path | None = None, prompts_only: bool = False,
                  generate_threshold: float = 0.1, generate_seeds: int = 5) -> dict[str, Any]:
    """Run every part; ``wide_long``: also the 10x-beam run on the long text (10x its cost).

    :param generate_threshold: the lazy extension of the generation part's lazy byte-mode rows
        (:func:`bench_generation`).
    :param generate_seeds: the generation part's draws per row (:func:`bench_generation`).
    :param prompts: mid-word prompts of the prompt-boundary part (0: none).
    :param prompt_records: that part's per-prompt JSON Lines, appended and resumed (:func:`prompt_boundary`).
    :param prompts_only: run the prompt-boundary part alone.
    """
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.infer.exact import exact_marginal
    from ppl_tok.infer.search import marginal_bounds

    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    narrow = StringSearchConfig(beam=beam, prefill="exact")  # the recorded prompt-boundary figures are exact's
    if prompts_only:
        if not prompts:
            raise ValueError("prompts_only needs prompts >= 1")
        return {"model": model, "beam": beam,
                "prompt_boundary": prompt_boundary(lm, mid_word_prompts(Path(data), prompts), narrow, prompt_records)}
    texts = list(SHORT)
    if long_bytes:
        texts.append(running_text(data, long_bytes))
    wide = StringSearchConfig(beam=10 * beam, prune=2 * narrow.prune)  # 10x the prefixes, twice the threshold
    rows = []
    for text in tqdm(texts, desc="bench strings", leave=False):
        r, fwd, secs = _run(lm, lambda: string_marginal(lm, text, config=narrow))
        row = {"bytes": r.n_bytes, "lower": r.lower, "upper": r.upper, "canonical": r.canonical,
               "gain_over_canonical": r.estimate - r.canonical, "forwards": fwd, "forwards_per_byte": fwd / r.n_bytes,
               "seconds": secs, "ms_per_byte": 1000 * secs / r.n_bytes}
        if r.n_bytes <= 128 or wide_long:
            w, wfwd, wsecs = _run(lm, lambda: string_marginal(lm, text, config=wide))
            row.update(wide_lower=w.lower, wide_upper=w.upper, gap_to_wide=w.estimate - r.estimate, wide_forwards=wfwd,
                       wide_seconds=wsecs)
        if r.n_bytes <= 128:
            b, bfwd, bsecs = _run(lm, lambda: marginal_bounds(text, lm, tolerance=1e-3, budget=fwd, batch=beam))
            row.update(best_first_lower=b.lower, best_first_upper=b.upper, best_first_forwards=bfwd,
                       best_first_seconds=bsecs)
        rows.append(row)
    exact, _, _ = _run(lm, lambda: exact_marginal(EXACT_STRING, lm))
    check, _, _ = _run(lm, lambda: string_marginal(lm, EXACT_STRING, config=narrow))
    generation = bench_generation(lm, data, beam, generate_bytes, generate_threshold, generate_seeds)
    boundary = (prompt_boundary(lm, mid_word_prompts(Path(data), prompts), narrow, prompt_records) if prompts
                else None)
    flat = [row["forwards_per_byte"] for row in rows]
    return {"model": model, "beam": beam, "rows": rows,
            "exact": {"text": EXACT_STRING, "exact": exact.log_marginal, "lower": check.lower, "upper": check.upper,
                      "contained": check.lower <= exact.log_marginal + 1e-6 <= check.upper + 2e-6},
            "generation": generation, "prompt_boundary": boundary,
            "forwards_per_byte_spread": max(flat) / min(flat)}


def _token_sampling(lm, prompt: str, n_bytes: int, seed: int = 0) -> dict[str, Any]:
    """Plain token sampling of ``n_bytes`` after ``prompt`` (its canonical tokens, one prefill): the baseline."""
    lm.clear_cache()
    lm.stats.reset()
    start = time.perf_counter()  # the token sampler pays for its prompt's prefill, as string-level sampling does
    state, made, tokens = lm.initial(prompt), 0, 0
    gen = torch.Generator().manual_seed(seed)
    while made < n_bytes:
        t = int(lm.sample_tokens([state], torch.rand(1, generator=gen, dtype=torch.float64))[0])
        made += len(lm.vocab[t] or b"")
        tokens += 1
        if lm.vocab[t] is None:  # the LM ended the string: a new draw would continue past its end
            break
        state = lm.extend([state], [t])[0]
    return {"bytes": made, "seconds": time.perf_counter() - start, "forwards": lm.stats.forwards,
            "calls": lm.stats.calls, "tokens": tokens}


def _over_seeds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from runs at seeds ``0..k-1``: totals, bytes/s as total bytes over total seconds, each seed's
    bytes/s (the spread), and forwards and LM calls per byte."""
    made = sum(r["bytes"] for r in runs)
    secs = sum(r["seconds"] for r in runs)
    out = {"seeds": len(runs), "bytes": made, "seconds": secs, "bytes_per_s": made / secs,
           "per_seed_bytes_per_s": [r["bytes"] / r["seconds"] for r in runs],
           "forwards": sum(r["forwards"] for r in runs), "calls": sum(r["calls"] for r in runs)}
    out["forwards_per_byte"] = out["forwards"] / max(1, made)
    out["calls_per_byte"] = out["calls"] / max(1, made)
    if "tokens" in runs[0]:
        out["tokens"] = sum(r["tokens"] for r in runs)
    return out


def bench_generation(lm, data: str | Path, beam: int, n_bytes: int, threshold: float,
                     seeds: int = 5) -> dict[str, Any]:
    """String-level generation against token sampling after the same prompt, bytes/s ratios in this process.

    After HellaSwag's 40-byte prompt: tokens mode; byte mode with every kept prefix extended (beam ``beam``
    and 2, one row where they are the same); byte mode with lazy extension (``extend_threshold = threshold``:
    a forward only where a kept hypothesis ends with a share of the text's mass, :mod:`ppl_tok.strings.beam`)
    at temperature 0.8, top-p 0.9 and greedy. After a 2 kB prompt of held-out running text: tokens mode (its
    canonical head prefilled, ``prefill="auto"``; the tail walked with every kept prefix extended, and lazily)
    against token sampling after the same prompt.

    Every row, the token sampler's included, is run at seeds ``0..seeds-1``: ``n_bytes`` of one draw hold
    about 20 tokens, and a draw's tokens per byte moves its bytes/s by 15% or more, so a single seed's ratio
    is mostly which text was drawn. Each row: bytes/s (total bytes over total seconds), its ratio to the
    token sampler's after the same prompt, each seed's bytes/s, and token-forwards and LM calls per byte
    generated (the prompt's included): a call's cost on a CPU is mostly reading the weights, so calls, not
    forwards, set the wall time of one-token steps.
    """
    from ppl_tok.strings.generate import generate

    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds must be a positive integer, got {seeds!r}")
    torch.set_num_threads(1)
    short, long = HELLASWAG[:40], running_text(data, 2000, "openbookqa")
    base = {"short": _over_seeds([_token_sampling(lm, short, n_bytes, seed) for seed in range(seeds)]),
            "2 kB": _over_seeds([_token_sampling(lm, long, n_bytes, seed) for seed in range(seeds)])}
    lazy = StringSearchConfig(beam=beam, extend_threshold=threshold)
    runs = [("tokens", "short", StringSearchConfig(beam=beam), {"mode": "tokens"}),
            (f"bytes, beam {beam}", "short", StringSearchConfig(beam=beam), {"mode": "bytes"}),
            *([("bytes, beam 2", "short", StringSearchConfig(beam=2), {"mode": "bytes"})] if beam != 2 else []),
            (f"bytes, lazy {threshold:g}, temperature 0.8", "short", lazy, {"temperature": 0.8}),
            (f"bytes, lazy {threshold:g}, top-p 0.9", "short", lazy, {"top_p": 0.9}),
            (f"bytes, lazy {threshold:g}, greedy", "short", lazy, {"greedy": True}),
            ("tokens after 2 kB", "2 kB", StringSearchConfig(beam=beam), {"mode": "tokens"}),
            (f"tokens after 2 kB, lazy {threshold:g}", "2 kB", lazy, {"mode": "tokens"})]
    out: dict[str, Any] = {"token_sampling": base, "threshold": threshold, "seeds": seeds, "rows": {}}
    for name, which, config, options in tqdm(runs, desc="bench generation", leave=False):
        prompt = short if which == "short" else long
        draws = []
        for seed in range(1 if options.get("greedy") else seeds):  # greedy draws one text at every seed
            g, fwd, secs = _run(lm, lambda: generate(lm, prompt, n_bytes, seed=seed, config=config,
                                                     progress=False, **options))
            draws.append({"bytes": len(g.data), "seconds": secs, "forwards": fwd, "calls": lm.stats.calls})
        row = _over_seeds(draws)
        out["rows"][name] = {"prompt": which, **row, "ratio": row["bytes_per_s"] / base[which]["bytes_per_s"]}
    return out


#: genlm-bytes' settings in the comparison: ``BeamParams(K, prune_threshold)`` (0.05 is its documented example)
GENLM_SETTINGS = ((5, 0.05),)
#: ppl-tok's settings: beam 5 pruned against the text's probability at genlm's threshold (0.05 = e^-3: 3 nats)
#: and at 4, 5, 6 and 10 nats, and beam 5 with the default (12 nats below the best prefix at the same offset)
OUR_SETTINGS = tuple(StringSearchConfig(beam=5, prune=p, prune_against="text") for p in (3.0, 4.0, 5.0, 6.0, 10.0)) + (
    StringSearchConfig(beam=5),)
#: the same walks with the text known in advance (:func:`~benchmarks.versus.walk_known`: the canonical rows in one
#: forward), at 4 and 5 nats below the text
KNOWN_SETTINGS = tuple(StringSearchConfig(beam=5, prune=p, prune_against="text") for p in (4.0, 5.0))
#: the reference (the "certified value" where its interval is narrow): beam 32, 15 nats below the text
REFERENCE = StringSearchConfig(beam=32, prune=15.0, prune_against="text")


def bench_genlm(genlm_python: str | Path, model: str = "smollm2-135m", data: str | Path = DATA_ROOT,
                n_bytes: int = 1000, genlm: Sequence[tuple[int, float]] = GENLM_SETTINGS,
                ours: Sequence[StringSearchConfig] = OUR_SETTINGS, reference: StringSearchConfig = REFERENCE,
                known: Sequence[StringSearchConfig] = KNOWN_SETTINGS,
                keep: str | Path | None = None, device: str | None = None, dtype: str | None = None,
                bos_id: int | None = None) -> dict[str, Any]:
    """ppl-tok against genlm-bytes: next-byte log-probs along the first ``n_bytes`` of OpenBookQA test questions.

    genlm-bytes runs in the interpreter ``genlm_python`` (its own environment) with
    ``BeamParams(K, prune_threshold)`` for each pair in ``genlm``; ppl-tok with each
    of ``ours`` and with ``reference``, and with each of ``known`` scoring the text known in advance
    (:func:`~benchmarks.versus.walk_known`); one thread each, one walk after the other.
    ``keep``: a folder where each walk's JSON is written as it finishes; a walk found
    there complete (same text) is reused, so an interrupted run resumes; ``read_back`` names those walks
    (their timings come from the process that ran them, so a ratio to one of them mixes two processes).
    """
    from ppl_tok.lm.cards import load_lm
    from benchmarks.versus import (Walk, causal_floor, compare, genlm_available, run_genlm, speed_ratios,
                                      walk_known, walk_ours)

    if genlm:
        why = genlm_available(genlm_python)
        if why:
            raise ValueError(f"genlm-bytes cannot be imported by {why} (install it there: pip install genlm-bytes)")
    torch.set_num_threads(1)
    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    text = running_text(data, n_bytes, "openbookqa").encode()
    longer = running_text(data, n_bytes + 4, "openbookqa")
    after = longer[len(text.decode("utf-8")):] if longer.encode().startswith(text) else ""
    following = after[:1].encode() or b" "  # the character after the text (walk_known)
    folder = Path(keep) if keep else None
    if folder:
        folder.mkdir(parents=True, exist_ok=True)

    read_back: list[str] = []  # walks measured by an earlier process (their timings are not this process's)

    def walked(name: str, run) -> Walk:
        path = folder / f"{name}.json" if folder else None
        if path and path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("text_hex") == text.hex():
                walk = Walk.from_json(data["walk"])
                read_back.append(walk.name)
                return walk
        walk = run()
        if path:
            path.write_text(json.dumps({"text_hex": text.hex(), "walk": walk.to_json()}), encoding="utf-8")
        return walk

    walks = []
    for k, threshold in tqdm(genlm, desc="genlm-bytes", leave=False):
        raw = folder / f"genlm-K{k}-p{threshold:g}.raw.json" if folder else None
        walks.append(walked(f"genlm-K{k}-p{threshold:g}", lambda: run_genlm(genlm_python, lm, text, k, threshold,
                                                                             keep=raw)))
    def tag(config: StringSearchConfig) -> str:
        against = "" if config.prune_against == "offset" else f"-{config.prune_against}"
        return f"beam{config.beam}-p{config.prune:g}{against}"

    for config in tqdm(ours, desc="ppl-tok", leave=False):
        walks.append(walked(f"ours-{tag(config)}", lambda: walk_ours(lm, text, config)))
    for config in tqdm(known, desc="ppl-tok, text known", leave=False):
        walks.append(walked(f"known-{tag(config)}", lambda: walk_known(lm, text, config, following)))
    ref = walked(f"reference-{tag(reference)}", lambda: walk_ours(lm, text, reference))
    floor = causal_floor(lm, text)
    out = compare(ref, walks)
    floor["ratio_to"] = {g.name: floor["bytes_per_cpu_s"] / g.bytes_per_cpu_s for g in walks
                         if "K" in g.info and g.cpu_seconds}
    out["causal_floor"] = floor
    out["read_back"] = read_back
    for clock in ("bytes_per_s", "bytes_per_cpu_s"):
        out[f"speed_ratio_{clock}"] = {f"{o.name} / {g.name}": speed_ratios(out, o.name, g.name, clock)
                                       for o in walks if "beam" in o.info for g in walks
                                       if g.info.get("K") == o.info["beam"] and g.cpu_seconds and o.cpu_seconds}
    out.update(model=model, text_bytes=len(text), text_head=text[:60].decode("utf-8", errors="replace"))
    return out


def format_genlm(r: dict[str, Any]) -> list[str]:
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    lines = [f"next-byte log-probs along {r['bytes']} bytes of OpenBookQA test questions, {r['model']}, 1 thread",
             f"reference: {r['reference']} ({r['reference_bytes_per_s']:.2f} bytes/s); its certified interval is "
             f"within {r['tolerance']:g} nats on {r['certified_bytes']} bytes (first wider: byte "
             f"{r['first_uncertified_byte']})",
             f"{'walk':40} {'B/s':>6} {'B/cpu-s':>7} {'excess b/B':>11} {'|err| b/B':>10} {'cert |err|':>10} "
             f"{'in ref int':>10} {'in own':>7}"]
    for w in r["walks"]:
        lines.append(f"{w['name']:40} {w['bytes_per_s']:>6.2f} {num(w['bytes_per_cpu_s'], '7.2f'):>7} "
                     f"{num(w['excess_bits_per_byte'], '11.2e'):>11} {num(w['mean_abs_error_bits_per_byte'], '10.2e'):>10} "
                     f"{num(w['certified_mean_abs_error_bits_per_byte'], '.2e'):>10} "
                     f"{w['inside_reference_interval']:>5}/{w['bytes']:<4} {w.get('inside_own_interval', '-'):>7}"
                     + (f"  p = 0 at bytes {w['zero_probability_bytes']}" if w["zero_probability_bytes"] else "")
                     + (f"  stopped: {w['error']}" if w.get("error") else ""))
    for clock, what in (("bytes_per_s", "wall"), ("bytes_per_cpu_s", "CPU")):
        lines += [f"{what} bytes/s, {k}: {v:.2f}x" for k, v in r[f"speed_ratio_{clock}"].items()]
    f = r.get("causal_floor")
    if f:
        lines.append(f"causal floor (one LM call per canonical token, {f['canonical_tokens']} tokens, "
                     f"{num(f['cpu_ms_per_call'], '.1f')} CPU-ms per call): {f['bytes_per_cpu_s']:.2f} B/cpu-s; "
                     f"the LM's top-1 is the next token at {num(f['top1'], '.1%')}, two in a row at "
                     f"{num(f['top1_pairs'], '.1%')}")
        lines += [f"causal floor / {k}: {v:.2f}x" for k, v in f["ratio_to"].items()]
    if r.get("read_back"):
        lines.append(f"read back from --genlm-keep, timed in an earlier process: {', '.join(r['read_back'])}")
    return lines


def format_strings(r: dict[str, Any]) -> list[str]:
    lines = []
    if "rows" in r:
        lines += [f"byte-synchronous beam, {r['model']}, beam {r['beam']} (10x: beam {10 * r['beam']}, twice the "
                  "threshold)",
                  f"{'bytes':>6} {'lower':>10} {'upper':>9} {'canonical':>10} {'fwd/B':>6} {'ms/B':>7} "
                  f"{'gap to 10x':>10} {'best-first at equal fwd':>26}"]
        for row in r["rows"]:
            gap = f"{row['gap_to_wide']:.4f}" if "gap_to_wide" in row else "-"
            bf = (f"[{row['best_first_lower']:.2f}, {row['best_first_upper']:.2f}]" if "best_first_lower" in row
                  else "-")
            lines.append(f"{row['bytes']:>6} {row['lower']:>10.4f} {row['upper']:>9.3f} {row['canonical']:>10.4f} "
                         f"{row['forwards_per_byte']:>6.2f} {row['ms_per_byte']:>7.1f} {gap:>10} {bf:>26}")
        e = r["exact"]
        lines += [f"forwards per byte: max/min over lengths = {r['forwards_per_byte_spread']:.2f}",
                  f"exact {e['text']!r}: {e['exact']:.4f} in [{e['lower']:.4f}, {e['upper']:.4f}]: "
                  f"{'yes' if e['contained'] else 'NO'}",
                  ]
    if r.get("prompt_boundary"):
        b = r["prompt_boundary"]
        lines.append(f"{b['prompts']} mid-word prompts ({r['model']}, beam {r['beam']}): string-level minus "
                     f"canonical-token log p(continuation): mean {b['mean_gain']:.3f} nats (95% CI "
                     f"{b['ci95'][0]:.3f} to {b['ci95'][1]:.3f}), median {b['median_gain']:.3f}, positive on "
                     f"{100 * b['share_gain_positive']:.0f}%; with the certified lower bound {b['mean_certified_gain']:.3f}")
    if "rows" in r:
        lines += format_generation(r["generation"])
    return lines


def format_generation(g: dict[str, Any]) -> list[str]:
    base = g["token_sampling"]
    lines = [f"token sampling ({g.get('seeds', 1)} seeds): {base['short']['bytes_per_s']:.2f} bytes/s after the "
             f"short prompt ({base['short']['forwards_per_byte']:.2f} forwards/byte, "
             f"{base['short']['calls_per_byte']:.3f} calls/byte), {base['2 kB']['bytes_per_s']:.2f} after the 2 kB "
             f"one ({base['2 kB']['forwards_per_byte']:.2f} forwards/byte, {base['2 kB']['calls_per_byte']:.3f} "
             "calls/byte)",
             f"{'string-level generation':42} {'B/s':>7} {'fwd/B':>6} {'calls/B':>8} {'ratio to token sampling':>24}"]
    lines += [f"{k:42} {v['bytes_per_s']:>7.2f} {v['forwards_per_byte']:>6.2f} {v['calls_per_byte']:>8.3f} "
              f"{v['ratio']:>23.3f}x" for k, v in g["rows"].items()]
    return lines


__all__ = ["bench_generation", "format_generation", "bench_strings", "bench_genlm", "format_genlm", "format_strings", "prompt_boundary", "running_text"]
