"""What every entry point accepts: the memory limits, and the checks of the Python API's arguments.

Memory grows with the work asked for: the particles of an importance-sampling
run (``pairs * samples``, each holding its tokens and weights), the bytes of a
text (its MDD, and one token position per byte in the worst case) and of a
context (the LM's prefix), the variables of a DIMACS formula (the reductions of
:mod:`ppl_tok.sat` build a string of ``3n + K`` bytes). :class:`Limits` holds
one bound for each; every entry point (the ``ppl-tok`` commands, ``qa run``,
:func:`~ppl_tok.infer.importance.marginals`, the lm-eval model) checks its input
against them **before** it allocates anything, and a request beyond a limit
is a :class:`LimitError` that names the limit, the value asked for and how to
raise it. The defaults are sized for a few GiB on top of a small model's
weights (SmolLM2); docs/limits.md gives the measured peaks.

Raising a limit: set the environment variable ``PPL_TOK_MAX_<NAME>`` (e.g.
``PPL_TOK_MAX_SAMPLES=4000000``), or in Python
``ppl_tok.limits.set_limits(Limits(samples=4_000_000))``. See docs/limits.md.

The argument checks (:func:`check_texts`, :func:`check_count`, :func:`check_seeds`)
turn a wrong type or range into a ``TypeError``/``ValueError`` naming the argument,
where otherwise Python would iterate a ``str`` character by character or torch
fail deep inside with a message that names nothing the caller wrote.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

#: Seeds are 32-bit unsigned integers (NumPy's global seed, which Pyro sets, takes no more).
MAX_SEED = 2**32 - 1
ENV_PREFIX = "PPL_TOK_MAX_"


class LimitError(ValueError):
    """A request beyond one of the :class:`Limits` (raised before any memory is allocated)."""


@dataclass(frozen=True)
class Limits:
    """Upper bounds on the size of a request (validated; see the module docstring).

    :param samples: importance samples (particles) per text.
    :param particles: particles of one call in all (``pairs * samples``).
    :param pairs: ``(context, text)`` pairs of one call (a QA batch: questions times answers).
    :param text_bytes: UTF-8 bytes of one text (its MDD; a vocabulary-only command such as ``count``).
    :param lm_bytes: UTF-8 bytes of context plus text scored by an LM (one forward over the context).
    :param batch_bytes: UTF-8 bytes of all contexts plus texts of one call: every pair's context is held
        in the KV cache for the whole call (about 46 kB per token on SmolLM2, 0.5 MB on a 7B model).
    :param dimacs_variables: variables of a DIMACS formula given to ``ppl-tok sat``.
    :param paths: tokenizations enumerated exactly (``--max-paths``), each kept with its log-probability.
    :param search_forwards: LM forwards of one certified search (``--exact-budget``): its frontier grows with them.
    :param search_batch: tokenizations an adversarial search scores in one batched call (``adversarial --batch-size``):
        each holds its LM state (its KV cache) until its target is read.
    :param generated_tokens: tokens generated in all (``canonicity``: samples times ``--max-tokens``).
    :param generated_bytes: bytes one ``generate`` call draws (``--max-bytes``): each is a step of the walk
        (bytes mode) or part of a sampled token (tokens mode), and the LM's states along it are held.
    :param corpus_bytes: bytes of one corpus read by ``perplexity`` (a file or standard input): it is held in
        memory, decoded and split into documents (each also within ``text_bytes``).
    :param beam: ``--beam``, the token prefixes the beam over strings keeps per byte offset: each holds its LM
        state, and a step's forward runs up to that many rows.
    :param prune_nats: ``--prune`` in nats: past about 745 nats (the log of float64's smallest positive number)
        every value prunes nothing, so a larger one is a typo, refused.
    """

    samples: int = 1 << 20
    particles: int = 1 << 22
    pairs: int = 100_000
    text_bytes: int = 1 << 20
    lm_bytes: int = 1 << 14
    batch_bytes: int = 1 << 17
    dimacs_variables: int = 1_000
    paths: int = 1 << 23
    search_forwards: int = 1_000_000
    search_batch: int = 4096
    generated_tokens: int = 1 << 15
    generated_bytes: int = 1 << 16
    corpus_bytes: int = 1 << 28
    beam: int = 10_000
    prune_nats: int = 10_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{f.name} must be a positive integer, got {value!r}")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Limits:
        """The defaults, each overridden by ``PPL_TOK_MAX_<NAME>`` if set."""
        environ = os.environ if environ is None else environ
        values: dict[str, int] = {}
        for f in fields(cls):
            key = ENV_PREFIX + f.name.upper()
            if key in environ:
                try:
                    values[f.name] = int(environ[key])
                except ValueError:
                    raise ValueError(f"{key}={environ[key]!r} is not an integer") from None
        try:
            return replace(cls(), **values)
        except ValueError as err:
            raise ValueError(f"{err} (from {ENV_PREFIX}*)") from None

    def check(self, name: str, value: int, what: str) -> None:
        """A :class:`LimitError` if ``value`` exceeds the limit ``name``; ``what`` says what was asked for."""
        bound = getattr(self, name)
        if value > bound:
            raise LimitError(f"{what} is {value:,}, more than the limit {name}={bound:,} that keeps memory bounded; "
                             f"raise it with {ENV_PREFIX}{name.upper()}=N if the machine has the memory "
                             "(docs/limits.md)")


_OVERRIDE: Limits | None = None


def limits() -> Limits:
    """The limits in force: those of :func:`set_limits`, else the defaults with the environment's overrides."""
    return _OVERRIDE if _OVERRIDE is not None else Limits.from_env()


def set_limits(value: Limits | None) -> None:
    """Use ``value`` from now on (``None``: back to the defaults and the environment)."""
    global _OVERRIDE
    if value is not None and not isinstance(value, Limits):
        raise TypeError(f"set_limits takes a Limits or None, got {type(value).__name__}")
    _OVERRIDE = value


# ------------------------------------------------------------ argument checks
def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_count(name: str, value: Any, low: int = 1) -> int:
    """``value`` as an ``int >= low``; a float, bool or string is a ``TypeError`` naming ``name``."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if int(value) < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def check_seed(name: str, value: Any) -> int:
    """``value`` as a seed: an integer in ``0..2**32-1``."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if not 0 <= int(value) <= MAX_SEED:
        raise ValueError(f"{name} must be an integer in 0..{MAX_SEED}, got {value}")
    return int(value)


def check_seeds(value: Any) -> list[int]:
    """A sequence of seeds, each checked by :func:`check_seed`."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"seeds must be a sequence of integers, got {type(value).__name__}")
    return [check_seed(f"seeds[{i}]", s) for i, s in enumerate(value)]


def check_text(name: str, value: Any) -> str:
    """``value`` if it is a ``str`` (else a ``TypeError`` naming ``name``)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def check_context(name: str, value: Any) -> str | Sequence[int]:
    """A context: a ``str`` or a sequence of token ids."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Sequence) and not hasattr(value, "tolist"):
        raise TypeError(f"{name} must be a str or a sequence of token ids, got {type(value).__name__}")
    ids = value.tolist() if hasattr(value, "tolist") else list(value)
    if not all(_is_int(t) for t in ids):
        raise TypeError(f"{name}: a context given as token ids must hold integers only")
    return value


def check_texts(name: str, value: Any) -> list[str]:
    """A sequence of texts: a ``str`` here would be read one character per text, so it is an error."""
    if isinstance(value, str):
        raise TypeError(f"{name} must be a sequence of texts, got the str {value[:40]!r}: wrap one text in a "
                        "list, [text]")
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Sequence) and not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence of texts, got {type(value).__name__}")
    out = list(value)
    for i, t in enumerate(out):
        check_text(f"{name}[{i}]", t)
    return out


def check_contexts(name: str, value: Any) -> list[str | Sequence[int]]:
    """A sequence of contexts (each a ``str`` or token ids); a ``str`` is an error, as in :func:`check_texts`."""
    if isinstance(value, str):
        raise TypeError(f"{name} must be a sequence of contexts (one per text), got the str {value[:40]!r}: "
                        "give [context] * len(texts)")
    if isinstance(value, (bytes, bytearray)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence of contexts, got {type(value).__name__}")
    out = list(value)
    for i, c in enumerate(out):
        check_context(f"{name}[{i}]", c)
    return out


def check_scored_text(parts: Sequence[tuple[str, str]], text: str = "prompt") -> None:
    """``lm_bytes`` of the strings one LM call reads in a row (``(name, string)`` pairs), and ``text_bytes`` of the
    one named ``text`` (its MDD): a :class:`LimitError` naming them, before any LM is loaded."""
    lim = limits()
    sizes = {name: len(value.encode("utf-8", "surrogatepass")) for name, value in parts}
    if text in sizes:
        lim.check("text_bytes", sizes[text], f"the {text}'s length in bytes")
    lim.check("lm_bytes", sum(sizes.values()), " plus ".join(sizes) + " in bytes")


def check_workload(texts: Sequence[str], contexts: Sequence[str | Sequence[int]], num_samples: int) -> None:
    """The :class:`Limits` of an importance-sampling call over ``texts`` (each after its context)."""
    lim = limits()
    lim.check("samples", num_samples, "the number of samples per text")
    lim.check("pairs", len(texts), "the number of (context, text) pairs")
    lim.check("particles", len(texts) * num_samples, "the number of particles (pairs x samples)")
    total = 0
    for i, (t, c) in enumerate(zip(texts, contexts)):
        text_bytes = len(t.encode("utf-8", "surrogatepass"))
        lim.check("text_bytes", text_bytes, f"text {i}'s length in bytes")
        context_bytes = len(c.encode("utf-8", "surrogatepass")) if isinstance(c, str) else 4 * len(c)
        lim.check("lm_bytes", text_bytes + context_bytes, f"pair {i}'s context plus text in bytes")
        total += text_bytes + context_bytes
    lim.check("batch_bytes", total, "the contexts plus texts of all pairs, in bytes")
