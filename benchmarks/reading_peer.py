"""psycho-toke's character beam against ppl-tok's walk on Provo texts, SmolLM2, side by side (issue 59, item 4).

The peer (rycolab/psycho-toke, Giulianelli et al. 2024) runs **its own code** in **its own virtual environment**
(never a dependency of ppl-tok, never copied here): `tokenization.character_beam.character_beam_estimator` (width
K=5, its `backend=2`) and `tokenization.get_surprisals.get_string_surprisals`, a fresh estimator per text as its
`get_surprisals.py` does. What :func:`peer_worker` adapts to load SmolLM2 (their loader knows GPT-2 by name only;
none of their files is edited):

* the model: the fp32 SmolLM2 folder in ppl-tok's cache (the same weights ppl-tok scores with), wrapped so that
  their one-token calls (a 1-d ``input_ids``, a stored ``past_key_values`` reused for several children) work on
  transformers 5: the input gets its batch axis, the logits lose it, and the cache is copied before each call
  (transformers 5's ``DynamicCache`` is extended in place; their code assumes the immutable tuples of 4.x);
* the vocabulary: their ``GPT2Mapping`` (SmolLM2's tokenizer is GPT-2 byte-level BPE) applied to every id,
  in place of their name check (``'gpt2' in tokenizer.name_or_path``);
* BOS: ``<|endoftext|>`` (id 0), ppl-tok's scoring BOS for SmolLM2 (the tokenizer reports ``<|im_start|>``).

ppl-tok runs :func:`~ppl_tok.reading.focal_surprisal.walk_events` (the study's walk, its default lazy extension) on
the same texts in this process. Compared per character ``x_o``: the peer's ``-log2 p(x_o | x_{<o})`` (its beam's
normalised next-character distribution) against ppl-tok's ``-log2 P(x_{<o+1}) / P(x_{<o})`` with its bracket
(:meth:`TextEvents.surprisal`), and, per prefix, the peer's cumulative ``log2 P(x_{<o})`` against ppl-tok's bracket
``[L_o, U_o]``. CPU seconds: the peer's beam per text (``process_time`` inside its worker; its process's total,
model load included, from ``getrusage``) and ppl-tok's ``process_time`` around each text's walk; one thread each.
The peer's process runs while ppl-tok walks in this one (each figure is its own process's CPU time; the wall
times are not comparable on a shared machine). ``--chars N`` cuts each text at a space after at most ``N``
characters: the peer's beam costs seconds per character on 2 CPU cores.

Usage (from the checkout's root, ppl-tok's venv; the peer's venv and checkout as below):
    python -m benchmarks.reading_peer --peer-python /work/peer-venvs/psychotoke/bin/python \\
        --peer-code /work/peers/psycho-toke --texts 1,2,3 --chars 50 --out results/reading/peer-smollm2
Writes OUT.json (summary, per-text times, per-character figures) and OUT.md. Not resumable (minutes per text).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LN2 = math.log(2.0)
STIMULI = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "reading" / "provo" / "stimuli.txt"


# ------------------------------------------------------------------ the peer's side (its venv; no ppl_tok here)
def peer_worker(texts_file: str, folder: str, code: str, k: int, out: str) -> None:
    """Run inside the peer's environment: per text, its character surprisals (nats) and CPU seconds, to ``out``."""
    import copy

    import torch
    import transformers

    sys.path.insert(0, code)
    import tokenization.lm as peer_lm
    from tokenization.character_beam import character_beam_estimator
    from tokenization.get_surprisals import get_string_surprisals

    torch.set_num_threads(1)
    c0 = time.process_time()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    tokenizer.bos_token = "<|endoftext|>"
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)

    class OneTokenCalls(torch.nn.Module):
        """Their call shape (1-d ids, a reused cache) on a transformers-5 decoder."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, labels: Any = None, past_key_values: Any = None,
                    use_cache: bool = True) -> Any:
            past = None if past_key_values is None else copy.deepcopy(past_key_values)
            got = self.inner(input_ids=input_ids[None, :], past_key_values=past, use_cache=use_cache)
            return transformers.modeling_outputs.CausalLMOutputWithPast(logits=got.logits[0],
                                                                        past_key_values=got.past_key_values)

    def decode(tok: Any) -> list[str]:
        mapping = peer_lm.GPT2Mapping(tok)
        decoded = [mapping(i) for i in range(len(tok))]
        peer_lm.check_collisions(decoded)  # as theirs does
        return decoded

    peer_lm.decode_tokenizer_vocab = decode
    llm = peer_lm.TokenizedLLM(tokenizer=tokenizer, model=OneTokenCalls(model), batch_size=None)
    load_cpu = time.process_time() - c0
    texts = Path(texts_file).read_text(encoding="utf-8").split("\n")
    rows = []
    for text in texts:
        c1, t1 = time.process_time(), time.perf_counter()
        estimator = character_beam_estimator(llm, K=k)
        with torch.no_grad():
            surprisals = get_string_surprisals(text, estimator)
        llm.clear_cache()
        rows.append({"text": text, "cpu_s": time.process_time() - c1, "wall_s": time.perf_counter() - t1,
                     "surprisal_nats": [float(s) for _, s in surprisals[:len(text)]]})
        Path(out).write_text(json.dumps({"load_cpu_s": load_cpu, "texts": rows}))


# ------------------------------------------------------------------ ppl-tok's side and the comparison
def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def compare(ours: Any, theirs_nats: list[float]) -> dict[str, Any]:
    """Per character: the peer's surprisal (bits) against ppl-tok's estimate and bracket; per prefix, the peer's
    cumulative log2-probability against ppl-tok's bracket on ``log2 P(x_{<o})``."""
    n = len(ours.text)
    diffs, inside, cum_inside, widths, rows = [], 0, 0, [], []
    cum = 0.0
    for o in range(n):
        est, lo, up = ours.surprisal(o, o + 1)
        peer = theirs_nats[o] / LN2
        cum -= peer
        diffs.append(peer - est)
        inside += lo - 1e-9 <= peer <= up + 1e-9
        widths.append(up - lo)
        low_o, up_o = ours.lower[o + 1] / LN2, ours.upper[o + 1] / LN2
        cum_inside += low_o - 1e-9 <= cum <= up_o + 1e-9
        rows.append([ours.text[o], round(peer, 6), round(est, 6), round(lo, 6), round(up, 6)])
    absd = [abs(d) for d in diffs]
    return {"chars": n, "mean_abs_diff_bits": statistics.fmean(absd), "p99_abs_diff_bits": quantile(absd, 0.99),
            "max_abs_diff_bits": max(absd), "mean_diff_bits": statistics.fmean(diffs),
            "peer_in_char_bracket": inside / n, "peer_prefix_in_bracket": cum_inside / n,
            "median_char_bracket_width_bits": statistics.median(widths),
            "total_peer_bits": sum(theirs_nats) / LN2, "total_ours_bits": ours.surprisal(0, n)[0],
            "total_ours_bracket_bits": list(ours.surprisal(0, n)[1:]), "per_char": rows}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--peer-python", required=True, help="the peer venv's python")
    p.add_argument("--peer-code", required=True, help="the peer's checkout (its tokenization/ package)")
    p.add_argument("--stimuli", type=Path, default=STIMULI)
    p.add_argument("--texts", default="1,2,3", help="Provo text ids, 1-based (default 1,2,3)")
    p.add_argument("--chars", type=int, default=0, help="the first CHARS characters, cut at a space (0: all)")
    p.add_argument("--k", type=int, default=5, help="the peer's beam width (default 5, the paper's)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    args = p.parse_args(argv)

    import torch

    from benchmarks.reading_cost import provo_texts
    from ppl_tok.cli.reading import EXTEND
    from ppl_tok.lm.cards import _convert, list_cards, load_lm
    from ppl_tok.reading.focal_surprisal import walk_events
    from ppl_tok.strings.beam import StringSearchConfig
    from ppl_tok.strings.surprisal import canonical_surprisals_many

    torch.set_num_threads(1)
    ids, texts = provo_texts(args.stimuli, args.texts, args.chars)
    folder = _convert(list_cards()[args.model], "model")  # the fp32 conversion ppl-tok scores with
    args.out.parent.mkdir(parents=True, exist_ok=True)
    texts_file, peer_out = args.out.with_suffix(".texts.tmp"), args.out.with_suffix(".peer.tmp")
    texts_file.write_text("\n".join(texts), encoding="utf-8")

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    cmd = [args.peer_python, str(Path(__file__).resolve()), "--worker", str(texts_file), str(folder),
           args.peer_code, str(args.k), str(peer_out)]
    # the peer's process runs while ppl-tok walks here: CPU seconds are each process's own
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    lm = load_lm(args.model)
    config = StringSearchConfig(extend_threshold=EXTEND)
    c0 = time.process_time()
    canonical_surprisals_many(lm, texts)
    canon_cpu = time.process_time() - c0
    lm = load_lm(args.model)  # a fresh LM: no row of the canonical pass cached for the walk
    walks = []
    for text in texts:
        c0, t1 = time.process_time(), time.perf_counter()
        ev = walk_events(lm, [text], config=config)[0]
        if isinstance(ev, Exception):
            raise SystemExit(str(ev))
        walks.append((ev, time.process_time() - c0, time.perf_counter() - t1))

    _, err = child.communicate()
    peer_wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if child.returncode != 0:
        raise SystemExit(f"the peer failed ({child.returncode}): {err[-3000:]}")
    peer = json.loads(peer_out.read_text())
    peer_cpu = usage.ru_utime + usage.ru_stime
    per_text = []
    for tid, text, (ev, cpu, wall) in zip(ids, texts, walks):
        row = next(r for r in peer["texts"] if r["text"] == text)
        per_text.append({"text_id": tid, "ours_cpu_s": cpu, "ours_wall_s": wall, "peer_cpu_s": row["cpu_s"],
                         "peer_wall_s": row["wall_s"], **compare(ev, row["surprisal_nats"])})
    ours_cpu = sum(r["ours_cpu_s"] for r in per_text)
    peer_beam_cpu = sum(r["peer_cpu_s"] for r in per_text)
    chars = sum(r["chars"] for r in per_text)
    summary = {
        "texts": ids, "chars_cut": args.chars, "model": args.model, "peer_k": args.k, "chars": chars,
        "words": sum(len(t.split()) for t in texts),
        "peer_beam_cpu_s": peer_beam_cpu, "peer_process_cpu_s": peer_cpu, "peer_process_wall_s": peer_wall,
        "peer_load_cpu_s": peer["load_cpu_s"], "ours_walk_cpu_s": ours_cpu, "canonical_cpu_s": canon_cpu,
        "peer_over_ours_cpu": peer_beam_cpu / ours_cpu,
        "mean_abs_diff_bits": sum(r["mean_abs_diff_bits"] * r["chars"] for r in per_text) / chars,
        "max_abs_diff_bits": max(r["max_abs_diff_bits"] for r in per_text),
        "peer_in_char_bracket": sum(r["peer_in_char_bracket"] * r["chars"] for r in per_text) / chars,
        "peer_prefix_in_bracket": sum(r["peer_prefix_in_bracket"] * r["chars"] for r in per_text) / chars,
        "load_avg_at_end": os.getloadavg()[0], "ours_config": {"extend_threshold": EXTEND},
    }
    args.out.with_suffix(".json").write_text(json.dumps({"summary": summary, "per_text": per_text}, indent=1) + "\n")
    md = [f"# psycho-toke's character beam (K={args.k}) vs ppl-tok's walk, {args.model}, Provo texts {args.texts}",
          "", f"`python -m benchmarks.reading_peer --texts {args.texts} --chars {args.chars} --out {args.out}` "
          "(one thread each; "
          f"load average {summary['load_avg_at_end']:.1f} on 2 cores: CPU seconds are the figure)", "",
          "| text | chars | peer CPU s | ppl-tok CPU s | mean abs diff (bits/char) | max | peer in char bracket "
          "| peer prefix in bracket | total peer / ppl-tok (bits) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in per_text:
        md.append(f"| {r['text_id']} | {r['chars']} | {r['peer_cpu_s']:.1f} | {r['ours_cpu_s']:.1f} | "
                  f"{r['mean_abs_diff_bits']:.4f} | {r['max_abs_diff_bits']:.3f} | {r['peer_in_char_bracket']:.3f} | "
                  f"{r['peer_prefix_in_bracket']:.3f} | {r['total_peer_bits']:.2f} / {r['total_ours_bits']:.2f} |")
    md += ["", f"peer / ppl-tok CPU (beam vs walk, load excluded): {summary['peer_over_ours_cpu']:.2f}x; canonical "
           f"scoring of the same texts: {canon_cpu:.2f} CPU s"]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    texts_file.unlink()
    peer_out.unlink()
    print("\n".join(md))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        peer_worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
    else:
        if not __package__:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        main()
