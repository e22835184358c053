"""The BOS a folder without a card is scored after: a known card's vocabulary, the tokenizer's pipeline, its
bos_token, or none (an error that names the fix)."""

import shutil
import warnings

import pytest
import torch

from ppl_tok import load_lm
from ppl_tok.lm.bos import BOSWarning, default_bos, pipeline_bos, scoring_bos, vocabulary_sha256
from ppl_tok.lm.cards import cache_dir, list_cards
from ppl_tok.lm.hf import HFLanguageModel
from tests.tiny_tokenizers import byte_level_tokenizer


def _bos(tokenizer):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bos, how = scoring_bos(tokenizer, list_cards().values())
    return bos, how, [str(w.message) for w in caught if issubclass(w.category, BOSWarning)]


def test_the_pipeline_s_token_wins_over_the_bos_token_attribute_with_a_warning():
    tok = byte_level_tokenizer(bos="<s>", prepend="<|endoftext|>")  # Qwen3-style: they disagree
    assert tok.bos_token_id == 1 and pipeline_bos(tok) == 0
    bos, how, said = _bos(tok)
    assert (bos, how) == (0, "the tokenizer's post-processor")
    assert len(said) == 1 and "prepends <|endoftext|> (0)" in said[0] and "<s> (1)" in said[0]
    assert "--bos-id" in said[0]


def test_agreeing_or_declared_only_bos_is_taken_silently():
    assert _bos(byte_level_tokenizer(bos="<s>", prepend="<s>"))[:3:2] == (1, [])
    assert _bos(byte_level_tokenizer(bos="<s>")) == (1, "the tokenizer's bos_token", [])  # GPT-2 style: no pipeline


def test_no_bos_anywhere_is_none_and_the_error_names_both_fixes():
    tok = byte_level_tokenizer(bos=None)  # Qwen2-style
    assert _bos(tok) == (None, "none", [])
    import transformers as tf

    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                               num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    lm = HFLanguageModel(model, tok, None, name="qwen2-style")
    with pytest.raises(ValueError, match=r"bos_id= \(load_lm\) / --bos-id"):
        lm.canonical_log_prob("Paris is")
    assert lm.canonical_log_prob(" is", "Paris") < 0  # a context is enough


def test_the_card_vocabularies_are_what_their_cards_say(smollm2_vocab):
    from transformers import AutoTokenizer

    card = list_cards()["smollm2-135m"]
    tok = AutoTokenizer.from_pretrained(cache_dir() / "smollm2-135m" / "tokenizer")
    assert vocabulary_sha256(tok, card.vocab_size) == card.vocab_sha256
    assert vocabulary_sha256(byte_level_tokenizer(), card.vocab_size) is None  # too small
    assert default_bos(card, "", tok) == 0


@pytest.fixture(scope="module")
def fine_tuned_smollm2(smollm2, tmp_path_factory):
    """What save_pretrained writes after a fine-tune: the card's vocabulary, no ppl-tok manifest, the
    tokenizer declaring <|im_start|>."""
    src = cache_dir() / "smollm2-135m" / "model"
    out = tmp_path_factory.mktemp("my-smollm2")
    for f in src.iterdir():
        if f.name.startswith("ppl-tok") or f.name.startswith("."):
            continue
        (out / f.name).symlink_to(f) if f.suffix == ".safetensors" else shutil.copy(f, out / f.name)
    return out


def test_a_fine_tuned_smollm2_folder_scores_as_the_card_and_says_so(smollm2, fine_tuned_smollm2):
    with pytest.warns(BOSWarning, match="vocabulary of the card 'smollm2-135m'.*<\\|im_start\\|> \\(1\\)"):
        lm = load_lm(str(fine_tuned_smollm2))
    assert lm.bos_id == 0
    text = " The capital of France is Paris."
    assert lm.canonical_log_prob(text) == pytest.approx(smollm2.canonical_log_prob(text), abs=1e-4)
    assert smollm2.canonical_log_prob(text) == pytest.approx(-19.88, abs=0.01)  # the number
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit BOS: no warning
        assert load_lm(str(fine_tuned_smollm2), bos_id=1).bos_id == 1
