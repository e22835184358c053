"""The Python API of the LM over strings refuses what it would misread (issue 37, finding 7): a stop string taken
character by character, numbers taken for bytes, a bool appended as byte 0x01, seeds torch would misuse."""

import pytest

from ppl_tok.strings import string_conditional
from ppl_tok.strings.generate import check_sampling, generate
from ppl_tok.strings.state import initial
from qa_toy import toy_lm


def test_one_stop_string_is_one_stop_not_one_per_character():
    assert check_sampling(8, 1.0, 1.0, "ab") == [b"ab"]
    assert check_sampling(8, 1.0, 1.0, ["ab", b"c"]) == [b"ab", b"c"]
    with pytest.raises(TypeError, match="stop strings must be str or bytes, got 3"):
        check_sampling(8, 1.0, 1.0, ["a", 3])
    lm = toy_lm()
    free = next(g for g in (generate(lm, "a", 12, seed=s) for s in range(50)) if b"h" in g.data and b"hh" not in g.data)
    seed = next(s for s in range(50) if generate(lm, "a", 12, seed=s).data == free.data)
    # stop="hh" must not stop at a lone "h" (it stopped at any "h" when the str was read as the stops "h", "h")
    assert generate(lm, "a", 12, seed=seed, stop="hh").data == free.data


@pytest.mark.parametrize("prompt, text", [(1, " a"), ("a", 2), (None, "a")])
def test_string_conditional_refuses_numbers_for_strings(prompt, text):
    with pytest.raises(TypeError, match="must be a str"):
        string_conditional(toy_lm(), prompt, text)


@pytest.mark.parametrize("data", [True, False, 1.5, [97]])
def test_extend_refuses_what_is_not_bytes(data):
    state = initial(toy_lm(), "a")
    with pytest.raises(TypeError, match="extend takes bytes"):
        state.extend(data)
    assert bytes(state.data) == b"a"


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (2**70, ValueError), (1.5, TypeError), (True, TypeError)])
def test_generate_refuses_seeds_torch_would_misuse(seed, error):
    with pytest.raises(error, match="seed must be an integer"):
        generate(toy_lm(), "a", 4, seed=seed)
