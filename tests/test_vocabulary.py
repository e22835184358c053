import pytest

from ppl_tok import ByteFallback, Vocabulary
from ppl_tok.vocabulary import gpt2_byte_decoder


def test_gpt2_byte_alphabet_is_a_bijection():
    table = gpt2_byte_decoder()
    assert sorted(table.values()) == list(range(256))
    assert table["\u0120"] == ord(" ") and table["\u010a"] == ord("\n") and table["a"] == ord("a")


def test_toy_vocabulary_keeps_duplicates_and_specials():
    v = Vocabulary.from_tokens([None, "a", "b", "ab", "ab", "<0x41>"])
    assert v[0] is None and v.special_ids == {0}
    assert v.ids_of("ab") == [3, 4]
    assert v.byte_fallback_ids == {5} and v[5] == b"A"
    assert v.decode([1, 3]) == b"aab"
    with pytest.raises(ValueError, match="special"):
        v.decode([0])


def test_toy_encode_is_longest_match_and_checked():
    v = Vocabulary.from_tokens(["a", "b", "ab", "abb"])
    assert v.encode("abbab") == [3, 2]
    with pytest.raises(ValueError, match="no token covers"):
        v.encode("abc")
    with pytest.raises(ValueError, match="empty"):
        v.encode("")


def test_bad_surfaces_are_rejected():
    with pytest.raises(ValueError, match="non-empty bytes"):
        Vocabulary((b"a", b""))
    with pytest.raises(ValueError):
        Vocabulary(())
    with pytest.raises(ValueError):
        Vocabulary((b"a",), fallback="sometimes")


def test_llama2_sentencepiece(llama2_vocab):
    v = llama2_vocab
    assert len(v) == 32000
    assert v.special_ids == {0, 1, 2}  # <unk>, <s>, </s>
    assert len(v.byte_fallback_ids) == 256
    assert v[v.ids_of(" Tok")[0]] == b" Tok"
    assert v[13] == b"\n"  # <0x0A>
    # Taken literally: no dummy-prefix space is added.
    assert v.decode(v.encode("Tokens")) == b"Tokens"
    assert [v.token_name(t) for t in v.encode(" Tokens")] == ["\u2581Tok", "ens"]


def test_llama2_missing_and_broken_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        Vocabulary.from_sentencepiece(tmp_path / "none.model")
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a readable SentencePiece model"):
        Vocabulary.from_sentencepiece(bad)


def test_smollm2_byte_level(smollm2_vocab):
    v = smollm2_vocab
    assert len(v) == 49152 and not v.byte_fallback_ids
    assert v[0] is None  # <|endoftext|> has no surface
    assert [v.token_name(t) for t in v.encode(" tongueless")] == ["\u0120tong", "uel", "ess"]
    # 21 byte values have no token (ENVIRONMENT.md)
    singles = {s[0] for s in v.surfaces if s is not None and len(s) == 1}
    missing = set(range(256)) - singles
    assert len(missing) == 21 and {0x04, 0x06, 0xC0, 0xFF} <= missing


def test_gemma_sentencepiece_fast_tokenizer(gemma_vocab):
    v = gemma_vocab
    assert len(v) == 262144
    assert v.byte_fallback_ids == set(range(238, 494))
    assert v[238] == b"\x00" and v[493] == b"\xff"
    assert v[2] is None  # <bos>
    assert [v.token_name(t) for t in v.encode(" tongueless")] == ["\u2581tong", "ueless"]
    assert v.decode(v.encode("héllo 世界\n")) == "héllo 世界\n".encode()


def test_fallback_policy_parses():
    assert Vocabulary.from_tokens(["a"], fallback="always").fallback is ByteFallback.ALWAYS


def test_special_token_spellings_are_ordinary_text(smollm2_vocab):
    from ppl_tok import compile_mdd

    v = smollm2_vocab
    ids = v.encode("<|endoftext|>")
    assert 0 not in ids and v.decode(ids) == b"<|endoftext|>"
    mdd = compile_mdd("<|endoftext|>", v)
    assert mdd.count() == 132 and mdd.canonical() == tuple(ids)
    assert v.decode(v.encode("a <|im_start|> b")) == b"a <|im_start|> b"


def _hf_llama2(tmp_path):
    """The Llama 2 tokenizer as transformers 5 loads a hub folder's (a fast tokenizer with the dummy prefix)."""
    import json
    import shutil

    from transformers import AutoTokenizer

    from tests.conftest import LLAMA2

    shutil.copy(LLAMA2, tmp_path / "tokenizer.model")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizer"}))
    return AutoTokenizer.from_pretrained(tmp_path)


def test_a_dummy_prefix_tokenizer_is_encoded_literally_and_starts_sequences_with_its_space(tmp_path, llama2_vocab):
    from ppl_tok import compile_mdd
    from tests.test_mdd import FIG1

    tok = _hf_llama2(tmp_path)
    assert tok.convert_ids_to_tokens(tok.encode("Paris is", add_special_tokens=False)) == ["\u2581Paris", "\u2581is"]
    v = Vocabulary.from_hf(tok)
    assert v.dummy_prefix and llama2_vocab.dummy_prefix  # the .model file says the same
    assert [v.token_name(t) for t in v.encode("Paris is")] == ["Par", "is", "\u2581is"]  # the text as it reads
    assert [v.token_name(t) for t in v.encode(" Paris is")] == ["\u2581Paris", "\u2581is"]  # the tokenizer's own
    assert v.decode(v.encode("Q: x\nA:")) == b"Q: x\nA:"
    assert v.sequence_start("Q: x") == " Q: x" and v.sequence_start(" Q") == " Q" and v.sequence_start("") == ""
    assert v.encode(v.sequence_start("Paris is")) == list(tok.encode("Paris is", add_special_tokens=False))
    assert [v.token_name(t) for t in v.encode("<s>")] == ["<", "s", ">"]  # a special token's spelling is text
    for text, count in FIG1.items():  # the paper's Fig. 1 from the transformers tokenizer too
        assert compile_mdd(text, v).count() == count
    assert compile_mdd("Tokens", v).count() != compile_mdd(" Tokens", v).count() == 52


def test_byte_level_is_read_from_tokenizer_json_not_a_dropped_attribute():
    from tokenizers import decoders, pre_tokenizers

    from ppl_tok.vocabulary import _is_byte_level
    from tests.tiny_tokenizers import byte_level_tokenizer

    tok = byte_level_tokenizer()
    assert not hasattr(tok, "byte_decoder") and not hasattr(tok, "byte_encoder")  # transformers 5
    assert _is_byte_level(tok, {})  # no Ġ piece consulted: the decoder says so
    tok.backend_tokenizer.decoder = decoders.Metaspace()
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    assert not _is_byte_level(tok, {})
    tok.backend_tokenizer.decoder = None  # only the pre-tokenizer, nested in a Sequence
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(),
                                                                   pre_tokenizers.ByteLevel(add_prefix_space=False)])
    assert _is_byte_level(tok, {})
    v = Vocabulary.from_hf(byte_level_tokenizer())
    assert not v.dummy_prefix and v.decode(v.encode(" Paris is\n")) == b" Paris is\n"
    assert all(s is None or b"\xc4\xa0" not in s for s in v.surfaces)  # Ġ decoded to a space, not kept
