"""The beam's knobs against a reference run: cost and share of the gain (``python -m benchmarks perplexity run --reference``, ``perplexity table``).

A ``bench perplexity`` folder (:class:`benchmarks.perplexity.BenchStore`) holds one row per
document: canonical and marginal token-forwards per byte and the gain of the marginal's floor
over canonical scoring, ``g = lower - canonical`` (nats). Against a reference folder on the same
documents (beam 8 at threshold 0, the studies' setting), a setting ``s`` is summed over the
documents ``D`` both measured:

    share of the gain  =  sum over d in D of g_s(d)  /  sum over d in D of g_ref(d),
    cost               =  sum over d of forwards_s(d) / sum over d of canonical forwards(d),

(a byte-weighted ratio of bits per byte). Both floors are certified lower bounds and both
``upper`` figures certified upper bounds of the same ``log p(x)``, so the two brackets must
meet: ``lower_s <= upper_ref`` and ``lower_ref <= upper_s``; a pair that does not is a bug
and is counted. Rows stored before brackets were (``lower_nats``) are rebuilt from the gain
and the width in bits per byte.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ppl_tok.common.lines import split_lines

LN2 = math.log(2)


def read_rows(folder: str | Path) -> dict[int, dict[str, Any]]:
    """A benchmark folder's rows by document index (its ``documents.jsonl``)."""
    path = Path(folder) / "documents.jsonl"
    if not path.is_file():
        raise ValueError(f"{folder}: not a bench perplexity folder (no documents.jsonl; give the --out of a run)")
    rows = {}
    for n, line in enumerate(split_lines(path.read_text(encoding="utf-8")), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not JSON ({err.msg})") from None
            missing = [k for k in ("index", "bytes", "marginal_forwards_per_byte", "gain_bits_per_byte") if k not in row]
            if missing:
                raise ValueError(f"{path}:{n}: not a bench perplexity row (no {missing[0]!r}; a perplexity run's "
                                 "folder? give the --out of python -m benchmarks perplexity)")
            rows[row["index"]] = row
    return rows


def bracket(row: dict[str, Any], canonical: float) -> tuple[float, float]:
    """``(lower, upper)`` of a row's marginal in nats; an older row's from its gain and width in bits per byte
    over ``canonical`` (the canonical log-likelihood of the same document, from another row)."""
    if "lower_nats" in row:
        return row["lower_nats"], row["upper_nats"]
    n = row["bytes"] * LN2
    lower = canonical + row["gain_bits_per_byte"] * n
    return lower, lower + row["bracket_width_bits_per_byte"] * n


def against_reference(rows: Sequence[dict[str, Any]], refs: dict[int, dict[str, Any]],
                      where: str | Path = "the reference") -> dict[str, Any]:
    """A setting's rows against a reference's on the documents both measured (module docstring)."""
    pairs = [(r, refs[r["index"]]) for r in rows if r["index"] in refs]
    for r, ref in pairs:
        if r["bytes"] != ref["bytes"]:
            raise ValueError(f"{where}: document {r['index']} has {ref['bytes']} bytes there, {r['bytes']} here: "
                             "not the same documents (give the reference run's --documents, --lengths, --corpus)")
    if not pairs:
        raise ValueError(f"{where}: no document in common with this run")

    def gain(row: dict[str, Any]) -> float:
        return row["gain_bits_per_byte"] * row["bytes"] * LN2

    def forwards(row: dict[str, Any], key: str) -> float:
        return row[key] * row["bytes"]

    meet, checked = 0, 0
    for r, ref in pairs:
        if "canonical_nats" not in r:  # (a row from before brackets were stored)
            continue
        (lo, hi), (ref_lo, ref_hi) = bracket(r, r["canonical_nats"]), bracket(ref, r["canonical_nats"])
        checked += 1
        meet += lo <= ref_hi + 1e-2 and ref_lo <= hi + 1e-2  # (float32 rounding across processes and devices)
    canon = sum(forwards(r, "canonical_forwards_per_byte") for r, _ in pairs)
    ref_gain = sum(gain(ref) for _, ref in pairs)
    return {"documents": len(pairs), "bytes": sum(r["bytes"] for r, _ in pairs),
            "share_of_gain": sum(gain(r) for r, _ in pairs) / ref_gain if ref_gain > 0 else None,
            "forwards_ratio": sum(forwards(r, "marginal_forwards_per_byte") for r, _ in pairs) / canon,
            "reference_forwards_ratio": sum(forwards(ref, "marginal_forwards_per_byte") for _, ref in pairs) / canon,
            "brackets_meet": meet, "brackets_checked": checked}


def format_reference(c: dict[str, Any]) -> str:
    share = "-" if c["share_of_gain"] is None else f"{100 * c['share_of_gain']:.1f}%"
    return (f"against the reference on {c['documents']} documents ({c['bytes']} bytes): {share} of its gain at "
            f"{c['forwards_ratio']:.2f}x canonical's token-forwards (the reference: "
            f"{c['reference_forwards_ratio']:.2f}x); certified brackets meet on {c['brackets_meet']}/"
            f"{c['brackets_checked']}")


def knob_table(folders: Sequence[str | Path], reference: str | Path) -> dict[str, Any]:
    """Each folder's setting (its ``run.json``) against ``reference``: the knob table (no LM is loaded)."""
    refs = read_rows(reference)
    out = []
    for folder in folders:
        settings = json.loads((Path(folder) / "run.json").read_text(encoding="utf-8"))
        rows = list(read_rows(folder).values())
        seconds = sum(r["bytes"] / r["marginal_bytes_per_s"] for r in rows)
        canon_seconds = sum(r["bytes"] / r["canonical_bytes_per_s"] for r in rows)
        out.append({"folder": str(folder), "beam": settings["beam"], "prune": settings["prune"],
                    "extend_threshold": settings.get("extend_threshold", 0.0),
                    "boundary_threshold": settings.get("boundary_threshold"),
                    "rejoin_threshold": settings.get("rejoin_threshold"),
                    "corpus": settings.get("corpus", "mixed"), "time_ratio": seconds / canon_seconds,
                    **against_reference(rows, refs, reference)})
    return {"reference": str(reference), "rows": out}


def format_knob_table(t: dict[str, Any]) -> list[str]:
    lines = [f"the beam's knobs against {t['reference']} (share of its gain over canonical; cost in canonical's "
             "token-forwards and wall time, same documents)",
             f"{'threshold':>9} {'boundary':>8} {'rejoin':>7} {'beam':>4} {'prune':>5} {'docs':>4} {'fwd ratio':>9} {'time ratio':>10} "
             f"{'gain share':>10} {'brackets meet':>13}  folder"]
    for r in t["rows"]:
        share = "-" if r["share_of_gain"] is None else f"{100 * r['share_of_gain']:.1f}%"
        boundary, rejoin = ("-" if r.get(k) is None else format(r[k], "g") for k in ("boundary_threshold",
                                                                                   "rejoin_threshold"))
        lines.append(f"{r['extend_threshold']:>9g} {boundary:>8} {rejoin:>7} {r['beam']:>4} {r['prune']:>5g} {r['documents']:>4} "
                     f"{r['forwards_ratio']:>8.2f}x {r['time_ratio']:>9.1f}x {share:>10} "
                     f"{r['brackets_meet']:>6}/{r['brackets_checked']:<6}  {r['folder']}")
    return lines
