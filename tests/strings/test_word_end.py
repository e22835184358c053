"""The word-end event's masses (strings/word_end.py): the columns of the full next-byte table, from only the
boundary bytes' runs, each LM row's read once; and the event's bracket against brute force."""

import math

import pytest

from ppl_tok.common.logspace import logsumexp
from ppl_tok.strings import StringSearchConfig
from ppl_tok.strings.state import END_OF_STRING, StringState
from ppl_tok.strings.word_end import _HEAD_MASSES, boundary_event, boundary_masses
from tests.strings.test_state import WIDE, brute_prefix, history_lm, tokenizations
from tests.strings.test_surprisal import VOCAB

PRUNED = StringSearchConfig(beam=2, prune=1.0)


@pytest.mark.parametrize("config", [WIDE, PRUNED], ids=["wide", "pruned"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_boundary_masses_are_the_next_byte_tables_columns(seed, config):
    """Every wanted byte's mass, the end's, the prefix's found mass and bound and the tolerance equal
    next_byte_log_probs' after every prefix of a text (1e-12; the same sums in the same order: bitwise here)."""
    lm = history_lm(seed, VOCAB)
    text = "ab ba. a.b é"
    state = StringState(lm, "", config)
    wanted = sorted({ord(c) for c in " .ab"})
    for n, byte in enumerate(text.encode(), 1):
        state.extend(bytes([byte]))
        nb = state.next_byte_log_probs()
        per_byte, end, found, bound, tol = boundary_masses(state, wanted)
        for b, m in zip(wanted, per_byte):
            assert m == pytest.approx(float(nb.unnormalised[b]), abs=1e-12), (n, b)
        assert end == pytest.approx(float(nb.unnormalised[END_OF_STRING]), abs=1e-12)
        assert found == pytest.approx(nb.prefix.found, abs=1e-12)
        assert bound == pytest.approx(nb.prefix.bound, abs=1e-12)
        assert tol == nb.tolerance


def test_a_rows_masses_are_read_once_and_kept_with_its_state():
    """A second reader of the same row gets the kept masses (no second log-sum-exp), and they go with the state."""
    lm = history_lm(2, VOCAB)
    state = StringState(lm, "", WIDE).extend(b"ab ")
    heads = [c.hyp.state for c in state.window[len(state.data)]]
    first = boundary_masses(state, [32, 46])
    assert all((32, 46) in _HEAD_MASSES[s] for s in heads)
    again = StringState(lm, "", WIDE).extend(b"ab ")
    assert boundary_masses(again, [32, 46]) == first


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_the_event_brackets_brute_force(seed):
    """log(sum over boundary bytes of P(x b) + P(x, end)): the bracket holds the brute-force figure (exact with the
    wide beam, 1e-9) and stays certified under pruning."""
    lm = history_lm(seed, VOCAB)
    ascii_bytes = [ord(" "), ord(".")]
    for x in (b"ab", b"ab ba", b"b.a"):
        special = sorted(lm.vocab.special_ids)
        end = logsumexp(lm.log_prob(v, "") + logsumexp(lm.state(lm.prefix_ids("") + v).log_probs[special].tolist())
                        for v in tokenizations(x, lm.vocab))
        wide = ["é"]  # (not a boundary of the word rules: a character past ASCII, read through a copy of the state)
        truth = logsumexp([brute_prefix(lm, x + bytes([b])) for b in ascii_bytes]
                          + [brute_prefix(lm, x + w.encode()) for w in wide] + [end])
        lo, found, up = boundary_event(StringState(lm, "", WIDE).extend(x), ascii_bytes, wide)
        assert found == pytest.approx(truth, abs=1e-9)
        assert lo <= truth + 1e-9 and truth <= up + 1e-9
        lo, found, up = boundary_event(StringState(lm, "", PRUNED).extend(x), ascii_bytes, wide)
        assert lo <= truth + 1e-9 <= up + 2e-9 and math.isfinite(found)
