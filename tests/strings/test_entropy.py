"""The next unit's entropy (canonical next-token entropy after each unit) against brute force on a toy LM."""

import math

import pytest
import torch

from ppl_tok.strings.entropy import next_token_entropies, row_entropy
from ppl_tok.strings.units import unit_byte_spans
from tests.strings.test_state import history_lm
from tests.strings.test_surprisal import VOCAB

ITEMS = ["ab ba.", "b ab a", "a"]


def brute_entropy(fn, prefix: tuple[int, ...]) -> float:
    """``-sum p log2 p`` of the toy LM's own next-token scores after ``prefix`` (normalised here, in Python floats)."""
    scores = fn(prefix)
    top = max(scores)
    z = top + math.log(sum(math.exp(s - top) for s in scores))
    return -sum(math.exp(s - z) * (s - z) for s in scores) / math.log(2)


@pytest.mark.parametrize("units", ["word", "char"])
def test_entropies_equal_brute_force(units):
    seed = 3
    lm = history_lm(seed, VOCAB)
    fn = lambda p: [float((7 * len(p) + 3 * sum(p) + t * seed) % 5) - 2.0 for t in range(len(VOCAB))]  # noqa: E731
    got = next_token_entropies(lm, ITEMS, units=units, contexts=["", "ab", ""])
    for text, context, hs in zip(ITEMS, ["", "ab", ""], got):
        spans, _ = unit_byte_spans(text, units)
        ids = lm.canonical(text)
        ends, at = [], 0
        for t in ids:
            ends.append(at)
            at += len(VOCAB[t])
        assert len(hs) == len(spans)
        for (_, b), h in zip(spans, hs):
            j = sum(1 for s in ends if s < b)  # the canonical tokens that start before the unit's end
            want = brute_entropy(fn, tuple(lm.prefix_ids(context)) + tuple(ids[:j]))
            assert h == pytest.approx(want, abs=1e-9)
            assert 0 <= h <= math.log2(len(VOCAB)) + 1e-12


def test_row_entropy_and_errors():
    assert row_entropy(torch.tensor([0.0, -math.inf])) == 0.0
    assert row_entropy(torch.full((4,), 0.25, dtype=torch.float64).log()) == pytest.approx(2.0, abs=1e-12)
    with pytest.raises(ValueError, match="give one of each per text"):
        next_token_entropies(history_lm(1, VOCAB), ["ab"], contexts=["", ""])


def test_the_frame_and_the_command_carry_the_column(tmp_path, capsys, monkeypatch):
    pytest.importorskip("pandas")
    import json

    import ppl_tok.cli.common
    from ppl_tok.cli.main import main
    from ppl_tok.strings.reading import surprisals_frame
    from tests.strings.test_state import WIDE

    lm = history_lm(3, VOCAB)
    want = [h for hs in next_token_entropies(lm, ITEMS) for h in hs]
    frame = surprisals_frame(lm, ITEMS, entropy=True, config=WIDE)
    assert frame["next_token_entropy"].tolist() == pytest.approx(want, abs=1e-12)
    assert "next_token_entropy" not in surprisals_frame(lm, ITEMS[:1], config=WIDE).columns
    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: lm)
    path = tmp_path / "s.txt"
    path.write_text("\n".join(ITEMS) + "\n")
    assert main(["surprisal", str(path), "--entropy", "--format", "jsonl", "--beam", "10000", "--prune", "1e4"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["next_token_entropy"] for r in rows] == pytest.approx(want, abs=1e-12)
