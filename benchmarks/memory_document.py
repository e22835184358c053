"""``perplexity memory``: the growth of the peak RSS of one long document's marginal
(:func:`bench_memory_document`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.perplexity import bench_documents, lazy_label
from ppl_tok.datasets import DATA_ROOT
from ppl_tok.strings.beam import StringSearchConfig


def _rss_mb() -> tuple[float, float]:
    """This process's resident memory now (MB, from ``/proc``) and at its peak
    (:func:`~ppl_tok.bench.timing.peak_rss_mb`)."""
    from ppl_tok.bench.timing import peak_rss_mb

    now = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
    return now, peak_rss_mb()


def bench_memory_document(model: str, *, data_dir: str | Path = DATA_ROOT, n_bytes: int = 20_000,
                          search: StringSearchConfig = StringSearchConfig(), every: int = 500,
                          device: str | None = None,
                          dtype: str | None = None, bos_id: int | None = None) -> dict[str, Any]:
    """The peak RSS of the marginal of one ``n_bytes``-byte document (running text, :func:`bench_documents`).

    The LM runs as ``ppl-tok perplexity --scoring marginal`` runs it (prefix cache capped,
    :func:`~ppl_tok.scorings.documents.cap_prefix_cache`). Every ``every`` bytes a line
    ``{"offset", "seconds", "rss_mb", "peak_rss_mb"}`` goes to standard error as it
    happens, so a run stopped early still says how the memory grew.
    """
    import json

    from ppl_tok.lm.cards import load_lm
    from ppl_tok.strings import string_marginal
    from ppl_tok.scorings.documents import cap_prefix_cache

    (text,) = bench_documents(data_dir, 1, n_bytes, n_bytes)
    before = _rss_mb()[0]
    lm = load_lm(model, device=device, dtype=dtype, bos_id=bos_id)
    cap_prefix_cache(lm)
    loaded = _rss_mb()[0]
    start = time.perf_counter()
    trace: list[dict[str, float]] = []
    mark = [every]

    def on_offset(offset: int) -> None:
        if offset >= mark[0]:
            mark[0] += every
            now, peak = _rss_mb()
            trace.append({"offset": offset, "seconds": round(time.perf_counter() - start, 1), "rss_mb": round(now),
                          "peak_rss_mb": round(peak)})
            print(json.dumps(trace[-1]), file=sys.stderr, flush=True)

    r = string_marginal(lm, text, "", search, on_offset=on_offset)
    now, peak = _rss_mb()
    return {"model": model, "bytes": len(text.encode()), "beam": search.beam, "prune": search.prune,
            **search.lazy_settings(), "tokens": len(lm.canonical(text)),
            "rss_before_load_mb": before, "rss_after_load_mb": loaded, "peak_rss_mb": peak, "rss_end_mb": now,
            "seconds": r.seconds, "forwards_per_byte": r.forwards_per_byte,
            "gain_nats": r.estimate - r.canonical, "trace": trace}


def format_memory_document(result: dict[str, Any]) -> list[str]:
    lazy = lazy_label(result)
    return [f"memory: the marginal (beam {result['beam']}, prune {result['prune']}{lazy}) of a {result['bytes']}-byte "
            f"document ({result['tokens']} tokens), {result['model']}",
            f"peak RSS {result['peak_rss_mb']:.0f} MB (after loading the model {result['rss_after_load_mb']:.0f} MB); "
            f"{result['seconds']:.0f} s, {result['forwards_per_byte']:.2f} forwards per byte"]
