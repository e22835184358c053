"""``python -m benchmarks diagnostics``: how well the warnings of :mod:`ppl_tok.infer.diagnostics` separate bad estimates.

For ``strings`` short (context, answer) pairs of a multiple-choice data set
whose tokenization counts are small (and the harder :data:`HARD_STRINGS`), the truth ``log p(x | c)`` is certified to
``1e-5`` nats (:func:`ppl_tok.infer.search.marginal_bounds` run until its bracket
closes: the exact marginal), and each of ``seeds`` seeds runs the look-ahead,
the uniform proposal, SMC and the stratified proposal with ``num_samples``
particles. A run is *bad* when ``|log p_hat - log p| > 1`` nat
(:data:`ppl_tok.infer.diagnostics.ERROR_NATS`); each warning's precision is the
fraction of the runs it flags that are bad, its recall the fraction of bad
runs it flags.

The LM runs once: every run is stored as one JSON line (``records``: the
estimate, its statement, ESS, standard error, k-hat, certified lower bound,
bracket, log-weights and the truth), appended durably as it finishes
(:class:`RunRecords`, a :class:`~ppl_tok.common.jsonl_store.JsonlStore` file), so an interrupted
benchmark resumes and :func:`analyze` re-scores the stored runs with the
current rule of :func:`ppl_tok.infer.diagnostics.estimate_checks` (and reports the
candidate signals, k-hat included, beside it) without calling the LM again.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ppl_tok.common.jsonl_store import JsonlStore
from ppl_tok.common.lines import split_lines
from ppl_tok.datasets import continuation, data_file, load_questions
from ppl_tok.infer import diagnostics
from ppl_tok.mdd import compile_mdd

METHODS = ("lookahead", "uniform", "smc", "stratified")
#: the learned proposal (``proposal_file``): run beside :data:`METHODS` when a file is given
LEARNED = "learned"
#: (context, text) pairs always added: the strings of issue 27 and of the tests, where the canonical
#: tokenization holds less of the mass (a certified lower bound from it is weaker)
HARD_STRINGS = (("", " unbelievable"), ("", " Hypnopaturist"), ("The sun is responsible for", " plants sprouting"),
                ("", " tongueless"), ("", " cats"), ("", " Tokens"))
#: a small configuration: runs in a minute on one CPU thread
QUICK = {"strings": 4, "seeds": 2, "num_samples": 32, "hard": ()}


def pick_strings(data: str | Path, vocab, count: int, min_paths: int = 24,
                 max_paths: int = 3000) -> list[tuple[str, str]]:
    """``count`` distinct (context, " answer") pairs with ``min_paths..max_paths`` tokenizations, spread over the file;
    every other one without its question as context (the canonical tokenization then holds less of the mass)."""
    pool: list[tuple[str, str]] = []
    seen = set()
    for q in load_questions(data):
        for choice in q.choices:
            text = continuation(choice)
            if text not in seen and min_paths <= compile_mdd(text, vocab).count() <= max_paths:
                seen.add(text)
                pool.append((q.context, text))
    if len(pool) < count:
        raise ValueError(f"{data} has {len(pool)} answers with {min_paths}-{max_paths} tokenizations, "
                         f"fewer than the {count} asked for")
    step = len(pool) / count
    return [(ctx if i % 2 == 0 else "", text) for i, (ctx, text) in ((i, pool[int(i * step)]) for i in range(count))]


def _record(result, method: str, seed: int, context: str, truth: float) -> dict[str, Any]:
    return {"text": result.text, "context": context, "method": method, "seed": seed, "truth": truth,
            "num_samples": result.num_samples, "log_marginal": result.log_marginal, "error": result.log_marginal - truth,
            "statement": result.statement, "log_se": result.log_se, "ess": result.ess, "khat": result.khat,
            "certified_lower": result.certified_lower, "bracket": result.bracket,
            "num_nonzero": int(sum(1 for w in result.log_weights.tolist() if w > -math.inf)),
            "log_weights": result.log_weights.tolist(), "forwards": result.forwards, "seconds": result.seconds,
            "distinct": result.distinct, "support": result.support}


class RunRecords(JsonlStore):
    """The ``records`` file: one line per (string, method, seed) run, appended a method's seeds at a time.

    Lines hold JSON's ``-Infinity``/``NaN`` where a run's figures are (as they always have); a key may
    repeat (a string both picked and in ``hard`` runs twice, as before).
    """

    record_name = "diagnostics run"
    unique_keys = False
    allow_nan = True

    @staticmethod
    def key(record: dict[str, Any]) -> tuple[str, str, str, int, int]:
        return record["context"], record["text"], record["method"], record["num_samples"], record["seed"]


def run(model: str = "smollm2-135m", data: str | Path | None = None, strings: int = 30,
        seeds: int = 5, num_samples: int = 64, records: str | Path = "diagnostics-runs.jsonl",
        search_budget: int = 16, methods: Sequence[str] = METHODS,
        hard: Sequence[tuple[str, str]] = HARD_STRINGS, device: str | None = None,
        dtype: str | None = None, bos_id: int | None = None,
        proposal_file: str | Path | None = None) -> dict[str, Any]:
    """Run (or resume) the benchmark, appending one JSON line per run to ``records``; return :func:`analyze`.

    ``data``: a multiple-choice data file (default: OpenBookQA's dev split under
    :data:`ppl_tok.datasets.DATA_ROOT`). ``proposal_file``: a learned proposal
    (:class:`~ppl_tok.proposals.LearnedProposal`, its default defensive share), run as the method
    ``"learned"`` beside ``methods`` (train it on strings that are not these: held-out words).
    """
    from tqdm import tqdm

    from ppl_tok.lm.cards import load_lm
    from ppl_tok.infer.importance import marginal, marginals
    from ppl_tok.infer.search import marginal_bounds
    from ppl_tok.infer.smc import smc_marginals

    unknown = set(methods) - set(METHODS) - {LEARNED}
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}: expected some of {METHODS + (LEARNED,)}")
    learned = None
    if proposal_file is not None:
        from ppl_tok.proposals import LearnedProposal

        learned = LearnedProposal.load(proposal_file)  # a bad file: its one-line error before the LM loads
        methods = tuple(methods) + ((LEARNED,) if LEARNED not in methods else ())
    elif LEARNED in methods:
        raise ValueError("the method learned needs its proposal file (proposal_file=, --proposal-file F)")
    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    data = data_file("openbookqa", "dev") if data is None else data
    pairs = pick_strings(data, lm.vocab, strings) + [tuple(p) for p in hard]
    path = Path(records)
    seed_list = list(range(seeds))
    start = time.perf_counter()
    with RunRecords.open_file(path) as store:
        done = {(r["context"], r["text"], r["method"], r["num_samples"]) for r in store.records}
        for context, text in tqdm(pairs, desc="diagnostics", unit="string", leave=False):
            todo = [m for m in methods if (context, text, m, num_samples) not in done]
            if not todo:
                continue
            lm.clear_cache()
            truth_bounds = marginal_bounds(text, lm, context=context, tolerance=1e-5, budget=None)
            truth = truth_bounds.lower
            for method in todo:
                if method == "smc":
                    results = smc_marginals([text] * seeds, lm, num_samples, contexts=[context] * seeds,
                                            seeds=seed_list)
                elif method == "stratified":
                    results = [marginal(text, lm, num_samples, guide="stratified", context=context, seed=s,
                                        search_budget=search_budget) for s in seed_list]
                else:
                    guide = learned.guide if method == LEARNED else method
                    results = marginals([text] * seeds, lm, num_samples, contexts=[context] * seeds, guide=guide,
                                        seeds=seed_list)
                store.append([_record(result, method, seed, context, truth)
                              for seed, result in zip(seed_list, results)])
    report = analyze(load_records(path), num_samples=num_samples)
    report.update(model=model, records=str(path), seconds=time.perf_counter() - start)
    return report


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """The stored runs (one JSON object per line, gzipped if the name ends ``.gz``; a partial last line from an
    interrupted run is skipped)."""
    path = Path(path)
    text = gzip.decompress(path.read_bytes()).decode("utf-8") if path.suffix == ".gz" else path.read_text("utf-8")
    rows = []
    for line in split_lines(text):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def checks_of(r: dict[str, Any]) -> list[str]:
    """The warning codes the current rule gives a stored run."""
    return [code for code, _ in diagnostics.estimate_checks(
        r["log_marginal"], statement=r["statement"], ess=r["ess"], log_se=r["log_se"],
        num_nonzero=r["num_nonzero"] if r["statement"] == diagnostics.UNCALIBRATED else None,
        num_samples=r["num_samples"], certified_lower=r["certified_lower"],
        bracket=None if r["bracket"] is None else tuple(r["bracket"]), resampled=r["method"] == "smc",
        distinct=r.get("distinct") if r["statement"] == diagnostics.UNCALIBRATED else None,
        support=r.get("support"))]


#: signals reported beside the warnings (not all of them warn): name -> (run -> flagged)
SIGNALS = {
    "ESS < 10": lambda r: r["ess"] < 10,
    "SE > 0.5": lambda r: r["log_se"] > 0.5,
    f"k-hat > {diagnostics.KHAT_LIMIT}": lambda r: r["khat"] is not None and r["khat"] > diagnostics.KHAT_LIMIT,
    "|error| > 2 SE": lambda r: abs(r["error"]) > 2 * r["log_se"],
}


def _score(flags: list[bool], bad: list[bool]) -> dict[str, Any]:
    hits = sum(f and b for f, b in zip(flags, bad))
    flagged, positives = sum(flags), sum(bad)
    return {"flagged": flagged, "true_positives": hits,
            "precision": hits / flagged if flagged else None, "recall": hits / positives if positives else None}


def analyze(rows: list[dict[str, Any]], num_samples: int | None = None) -> dict[str, Any]:
    """Precision and recall of each warning (and signal) for "off by more than 1 nat" over stored runs."""
    if num_samples is not None:
        rows = [r for r in rows if r["num_samples"] == num_samples]
    bad = [abs(r["error"]) > diagnostics.ERROR_NATS for r in rows]
    codes = [checks_of(r) for r in rows]
    names = sorted({c for cs in codes for c in cs})
    warnings = {name: _score([name in cs for cs in codes], bad) for name in names}
    warnings["any warning"] = _score([bool(cs) for cs in codes], bad)
    signals = {name: _score([bool(fn(r)) for r in rows], bad) for name, fn in SIGNALS.items()}
    by_method = {}
    for m in sorted({r["method"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["method"] == m]
        by_method[m] = {"runs": len(idx), "bad": sum(bad[i] for i in idx),
                        **_score([bool(codes[i]) for i in idx], [bad[i] for i in idx])}
    exact_ok = [i for i, r in enumerate(rows) if r["statement"] == diagnostics.CERTIFIED or abs(r["error"]) < 1e-4]
    missed = [{"text": rows[i]["text"], "method": rows[i]["method"], "seed": rows[i]["seed"],
               "error": rows[i]["error"], "ess": rows[i]["ess"], "log_se": rows[i]["log_se"], "khat": rows[i]["khat"]}
              for i in range(len(rows)) if bad[i] and not codes[i]]
    return {"runs": len(rows), "strings": len({(r["context"], r["text"]) for r in rows}), "bad": sum(bad),
            "num_samples": num_samples, "warnings": warnings, "signals": signals, "by_method": by_method,
            "exact_or_certified_runs": len(exact_ok),
            "warned_on_exact_or_certified": sum(bool(codes[i]) for i in exact_ok), "missed": missed,
            "rule": {"error_nats": diagnostics.ERROR_NATS, "se_limit": diagnostics.SE_LIMIT,
                     "smc_se_limit": diagnostics.SMC_SE_LIMIT}}


def _pct(x: float | None) -> str:
    return "   n/a" if x is None else f"{100 * x:5.1f}%"


def format_report(r: dict[str, Any]) -> list[str]:
    lines = [f"Warnings against 'off by more than {r['rule']['error_nats']:g} nat': {r['runs']} runs "
             f"({r['strings']} strings, N={r['num_samples']}), {r['bad']} bad",
             f"{'warning or signal':32} {'flagged':>8} {'precision':>10} {'recall':>8}"]
    for kind in ("warnings", "signals"):
        for name, s in r[kind].items():
            label = name if kind == "warnings" else f"({name})"
            lines.append(f"{label:32} {s['flagged']:8d} {_pct(s['precision']):>10} {_pct(s['recall']):>8}")
    lines.append(f"{'method':12} {'runs':>5} {'bad':>5} {'warned':>7} {'precision':>10} {'recall':>8}")
    for m, s in r["by_method"].items():
        lines.append(f"{m:12} {s['runs']:5d} {s['bad']:5d} {s['flagged']:7d} {_pct(s['precision']):>10} "
                     f"{_pct(s['recall']):>8}")
    lines.append(f"certified or exact to 1e-4: {r['exact_or_certified_runs']} runs, "
                 f"{r['warned_on_exact_or_certified']} warned")
    lines += [f"MISSED: {m['text']!r} {m['method']} seed {m['seed']}: error {m['error']:+.3f}, ESS {m['ess']:.1f}, "
              f"SE {m['log_se']:.3f}" for m in r["missed"]]
    return lines
