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
