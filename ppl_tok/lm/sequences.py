"""The log-probability of whole token sequences: the chain rule over the engine's states (a part of every
:class:`~ppl_tok.lm.base.LanguageModel`, which runs the states; a backend may run a sequence in one forward
instead, as :meth:`ppl_tok.lm.hf.HFLanguageModel.token_log_probs_after` does)."""

from __future__ import annotations

from collections.abc import Sequence


class SequenceScores:
    """``log p(tokens | prefix)`` and its terms, over :meth:`states`, :meth:`extend` and :meth:`token_log_probs`
    of the :class:`~ppl_tok.lm.base.LanguageModel` it is part of."""

    def log_prob(self, tokens: Sequence[int], context: str | Sequence[int] = "") -> float:
        """``log p(tokens | BOS, context)``: the sum of the next-token log-probs along ``tokens``."""
        return self.log_probs_many([tokens], [context])[0]

    def log_probs_many(self, texts_tokens: Sequence[Sequence[int]],
                       contexts: Sequence[str | Sequence[int]]) -> list[float]:
        """:meth:`log_prob` of many token sequences, each after its own context, batched step by step."""
        if len(texts_tokens) != len(contexts):
            raise ValueError(f"{len(texts_tokens)} token sequences but {len(contexts)} contexts")
        return self.log_probs_after([self.prefix_ids(c) for c in contexts], texts_tokens)

    def log_probs_after(self, prefixes: Sequence[Sequence[int]], texts_tokens: Sequence[Sequence[int]]) -> list[float]:
        """``log p(texts_tokens[i] | prefixes[i])`` (no BOS added): :meth:`token_log_probs_after` summed."""
        return [sum(lps, 0.0) for lps in self.token_log_probs_after(prefixes, texts_tokens)]

    def token_log_probs_after(self, prefixes: Sequence[Sequence[int]], texts_tokens: Sequence[Sequence[int]],
                              keep_states: bool = True) -> list[list[float]]:
        """``out[i][k] = log p(texts_tokens[i][k] | prefixes[i], texts_tokens[i][:k])``.

        The prefixes are run once (one batched prefill, or the cache); the token sequences then advance together,
        one batched extension per position. ``keep_states=False``: a backend that runs a sequence in one forward
        caches the state before its last token only, not every position's (with the ``[T, V]`` rows)."""
        if len(texts_tokens) != len(prefixes):
            raise ValueError(f"{len(texts_tokens)} token sequences but {len(prefixes)} prefixes")
        states = self.states([tuple(int(t) for t in p) for p in prefixes])
        seqs = [list(map(int, t)) for t in texts_tokens]
        out: list[list[float]] = [[] for _ in seqs]
        for step in range(max((len(s) for s in seqs), default=0)):
            live = [i for i, s in enumerate(seqs) if step < len(s)]
            if step:
                for i, st in zip(live, self.extend([states[i] for i in live], [seqs[i][step - 1] for i in live])):
                    states[i] = st
            lps = self.token_log_probs([states[i] for i in live], [[seqs[i][step]] for i in live])
            for i, lp in zip(live, lps):
                out[i].append(float(lp[0]))
        return out

    def canonical(self, text: str) -> list[int]:
        """The canonical tokenization of ``text`` (the tokenizer's own encoding, taken literally)."""
        return self.vocab.encode(text)

    def canonical_log_prob(self, text: str, context: str | Sequence[int] = "") -> float:
        """``log p(v* | context)`` for the canonical tokenization ``v*`` of ``text``."""
        return self.log_prob(self.canonical(text), context)
