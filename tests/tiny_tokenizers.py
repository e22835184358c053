"""Tokenizers built at test time (not a test module): a byte-level BPE trained on a few sentences, small
enough that the tiny models of the conformance suite have a vocabulary of a few hundred ids."""

from __future__ import annotations

from functools import lru_cache

CORPUS = [
    "The capital of France is Paris. Paris is a city of bridges and tokens.",
    "Tokenizations grow rapidly with sentence length, and the canonical one takes most of the mass.",
    "Q: Where is the signal in tokenization space? A: in the marginal over all tokenizations.",
    "Hello world, hello tokens; the quick brown fox jumps over the lazy dog.",
]
SPECIALS = ["<|endoftext|>", "<s>", "<pad>"]


@lru_cache(maxsize=None)
def _trained(size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    return tok.to_str()


def byte_level_tokenizer(size: int = 320, *, bos: str | None = "<|endoftext|>", prepend: str | None = None):
    """A fast ``transformers`` tokenizer: byte-level BPE of ``size`` ids (specials 0-2), ``bos`` its
    ``bos_token`` and ``prepend`` the token its post-processor puts before every text (``None``: nothing)."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_str(_trained(size))
    if prepend is not None:
        tok.post_processor = processors.TemplateProcessing(single=f"{prepend} $A", pair=f"{prepend} $A $B",
                                                           special_tokens=[(prepend, tok.token_to_id(prepend))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token="<|endoftext|>",
                                   pad_token="<pad>")


def llama2_folder(out, *, hidden: int = 16, seed: int = 0):
    """A Llama-2-style model folder in ``out``: the real Llama 2 tokenizer (``../shared``, converted by
    ``transformers`` as a hub folder's would be: dummy prefix, BOS ``<s>`` prepended) and a tiny random
    Llama built from a config of its vocabulary (init spread 0.25, so the context moves the scores)."""
    import json
    import shutil
    from pathlib import Path

    import torch
    import transformers as tf

    out = Path(out)
    src = out / "sentencepiece"
    src.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).resolve().parents[2] / "shared" / "tokenizers" / "llama2" / "tokenizer.model", src)
    (src / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    tokenizer = tf.AutoTokenizer.from_pretrained(src)
    torch.manual_seed(seed)
    config = tf.LlamaConfig(vocab_size=32000, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=1, initializer_range=0.25,
                            bos_token_id=1, eos_token_id=2, max_position_embeddings=512)
    tf.LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    shutil.rmtree(src)
    return out
