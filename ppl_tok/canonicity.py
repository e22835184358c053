"""Is generated text canonical? (Geh et al., 2024, Fig. 3.)

Sample token sequences from the LM unconditionally (after BOS), and for each
length ``t`` decode the first ``t`` tokens and re-encode the text with the
tokenizer: the prefix is canonical when ``encode(decode(v_<=t)) == v_<=t``.
Tokens without a surface (EOS, control tokens) are masked out of the sampling
distribution, so every sample is text. A prefix that ends inside a UTF-8
character cannot be re-encoded as text and counts as non-canonical (reported
separately as ``undecodable``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm import tqdm

from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.device import to_device, to_host
from ppl_tok.common.sampling import inverse_cdf


@dataclass(frozen=True)
class Canonicity:
    """``canonical[t-1]``: the fraction of samples whose first ``t`` tokens are canonical."""

    lengths: list[int]
    canonical: list[float]
    undecodable: list[float]
    samples: list[tuple[int, ...]]


def _is_canonical(lm: LanguageModel, tokens: tuple[int, ...]) -> bool | None:
    try:
        text = lm.vocab.decode(tokens).decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        return tuple(lm.vocab.encode(text)) == tokens
    except ValueError:
        return False


def canonicity(lm: LanguageModel, num_samples: int = 32, max_tokens: int = 32, seed: int = 0,
               progress: bool = True) -> Canonicity:
    """Generate ``num_samples`` sequences of ``max_tokens`` tokens and measure canonicity per length."""
    if num_samples < 1 or max_tokens < 1:
        raise ValueError("num_samples and max_tokens must be >= 1")
    g = torch.Generator().manual_seed(seed)
    states = [lm.initial()] * num_samples
    row = states[0].log_probs
    # tokens without a surface, and ids past the vocabulary (a padded LM head): on the device once
    banned = torch.ones(row.shape[-1], dtype=torch.bool)
    banned[: len(lm.vocab.surfaces)] = torch.tensor([s is None for s in lm.vocab.surfaces])
    banned = to_device(banned, row.device)
    tokens: list[list[int]] = [[] for _ in range(num_samples)]
    for _ in tqdm(range(max_tokens), desc="generating", unit="token", disable=not progress):
        logits = torch.stack([s.log_probs for s in states]).double()  # on the model's device
        logits.masked_fill_(banned, -torch.inf)
        cdf = torch.softmax(logits, -1).cumsum(-1)  # inverse CDF at seeded host uniforms
        u = to_device(torch.rand(num_samples, 1, generator=g, dtype=torch.float64), cdf.device)
        draws = to_host(inverse_cdf(cdf, u).flatten(), "tokens").tolist()
        for seq, tok in zip(tokens, draws):
            seq.append(tok)
        states = lm.extend(states, draws)
    canonical, undecodable = [], []
    for t in range(1, max_tokens + 1):
        verdicts = [_is_canonical(lm, tuple(seq[:t])) for seq in tokens]
        canonical.append(sum(v is True for v in verdicts) / num_samples)
        undecodable.append(sum(v is None for v in verdicts) / num_samples)
    return Canonicity(list(range(1, max_tokens + 1)), canonical, undecodable, [tuple(s) for s in tokens])
