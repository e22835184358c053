"""Rolling windows (``ppl_tok/scorings/windows.py``): every token scored once, as lm-eval's windows do."""

from __future__ import annotations
import pytest
from ppl_tok.perplexity import (
    rolling_windows,
    text_windows,
)
from qa_toy import toy_lm


def test_rolling_windows_cover_every_token_once():
    for n in range(1, 30):
        for length in range(1, 9):
            ws = rolling_windows(n, length)
            assert [t for w in ws for t in range(w.start, w.end)] == list(range(n))
            assert ws[0].bos and not any(w.bos for w in ws[1:])
            for w in ws[1:]:
                assert w.end - w.context == length + 1 and w.context >= 0  # the forward sees `length` positions


def test_rolling_windows_equal_lm_evals():
    lm_eval_utils = pytest.importorskip("lm_eval.utils")
    for n in range(1, 25):
        for length in range(1, 8):
            tokens = list(range(100, 100 + n))
            want = [lm_eval_utils.make_disjoint_window(w)
                    for w in lm_eval_utils.get_rolling_token_windows(tokens, -1, length, 1)]
            got = [([-1] if w.bos else tokens[w.context: w.start], tokens[w.start: w.end])
                   for w in rolling_windows(n, length)]
            assert got == want, (n, length)


def test_text_windows_rebuild_the_text_and_fit_the_window():
    lm = toy_lm()
    text = "abc de fgh ab cd ef gh ba ab"
    tokens = lm.canonical(text)
    for length in (3, 4, 6, 50):
        ws = text_windows(lm.vocab, tokens, length)
        assert "".join(w.text for w in ws) == text
        assert all(1 + len(w.context) + len(w.tokens) <= length for w in ws)


def test_lockstep_groups_hold_at_most_the_bytes_asked_for_and_every_item_once():
    """Issue 50: every window of a document was swept at once (a 1 MB document passed 6 GB)."""
    from ppl_tok.scorings.windows import lockstep_groups

    sizes = [5, 3, 9, 20, 1, 1, 8]
    groups = lockstep_groups(sizes, 10)
    assert [sizes[g] for g in groups] == [[5, 3], [9], [20], [1, 1, 8]]
    assert lockstep_groups([], 10) == [] and lockstep_groups([4], 1) == [slice(0, 1)]
