"""A toy LM and tiny multiple-choice files for the QA tests (fast, exact, CPU)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from ppl_tok import BigramLM, Vocabulary

TOKENS = [None] + list(" abcdefgh") + [" a", " b", " c", "ab", "ba", "cd", "de", "ef", "abc", " ab", "gh"]


def toy_lm(seed: int = 0) -> BigramLM:
    return BigramLM.random(Vocabulary.from_tokens(TOKENS), seed=seed, bos_id=0, name="toy-bigram")


def write_questions(path: Path, n: int, seed: int = 0, choices: int = 3) -> Path:
    """``n`` random questions over the toy alphabet, one JSON object per line."""
    rng = random.Random(seed)
    word = lambda: "".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 4)))  # noqa: E731
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            row = {"id": f"q{i}", "context": " ".join(word() for _ in range(2)),
                   "choices": [word() for _ in range(choices)], "label": rng.randrange(choices)}
            f.write(json.dumps(row) + "\n")
    return path


def learned_proposal_file(path: Path, lm: BigramLM, steps: int = 4) -> Path:
    """A learned proposal for ``lm``, trained quickly (``steps`` wake-sleep steps) on a tiny word list, saved at ``path``."""
    from ppl_tok.infer.learn import train_proposal

    train_proposal(["abcde", " ab cd", "efgh", "bab"], lm, steps, particles=4, lr=0.5, path=path, progress=False)
    return path
