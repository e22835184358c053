"""The parameters the scorings share the declaration of (:mod:`ppl_tok.common.params`): the byte-synchronous beam's
(:class:`SearchParams`, of ``beam``, ``prefix``, ``with-end`` and ``conditional``), the particles' count, seed and
proposal (:func:`samples_param`, :func:`seed_param`, :func:`proposal_param`), each default once; and the memory
limits of the values a consumer is given (:func:`check_limits`). Read without torch (``ppl-tok --help``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from ppl_tok.common.arguments import POSITIVE, SEED, positive_or_inf, share
from ppl_tok.common.params import Params, Spec, param, specs
from ppl_tok.strings.beam import PREFILL_MODES, StringSearchConfig


#: The lazy-extension shares of the ``beam`` scoring of documents by default (its params,
#: :class:`ppl_tok.scorings.beam.BeamParams`; the ``extend_threshold``, ``boundary_threshold`` and
#: ``rejoin_threshold`` of :class:`~ppl_tok.strings.StringSearchConfig`): the cheapest setting that kept at least
#: 90% of the exhaustive beam's gain over canonical on held-out text (``benchmarks/perplexity_defaults.py``,
#: docs/perplexity.md).
BEAM_LAZY_DEFAULT: dict[str, float | None] = {"extend_threshold": 0.2, "boundary_threshold": 1e-4,
                                              "rejoin_threshold": 1e-6}
#: The lazy-extension shares, in :class:`~ppl_tok.strings.StringSearchConfig`'s order.
LAZY_FIELDS = ("extend_threshold", "boundary_threshold", "rejoin_threshold")
#: Importance particles by default, wherever a scoring draws them (perplexity, lm-eval, Python).
DEFAULT_SAMPLES = 64


def samples_param(help: str = "importance particles per window or request") -> Any:
    """The ``num_samples`` field of a scoring that draws particles (``--samples``, ``num_samples=``)."""
    return param(DEFAULT_SAMPLES, help, flag="--samples", type=POSITIVE, metavar="N", limit="samples")


def seed_param(help: str = "the seed each document's and window's particles derive from") -> Any:
    """The ``seed`` field of a scoring whose particles it seeds (``--seed``, ``seed=``)."""
    return param(0, help, flag="--seed", type=SEED)


def proposal_param() -> Any:
    """The ``proposal`` field: the importance proposal's record (:func:`ppl_tok.proposals.proposal_settings`;
    ``None``: the look-ahead), given as ``--proposal``/``--proposal-file`` and lm-eval's ``proposal=``."""
    return param(None, "the importance proposal's record (ppl_tok.proposals.proposal_settings; None: the look-ahead)")


def proposal_value(name: str | None = "lookahead", file: str | None = None,
                   params: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``proposal`` field's value of a consumer's ``--proposal NAME [--proposal-file FILE]`` (``proposal=``):
    the record of :func:`ppl_tok.proposals.proposal_settings`, or ``None`` (the field's default) for the plain
    look-ahead, so that every consumer's default is the field's.

    :raises ValueError: an unknown proposal, a file it cannot take (:func:`~ppl_tok.proposals.proposal_settings`).
    """
    from ppl_tok.proposals import proposal_settings

    record = proposal_settings(name, file, params)  # params: the proposal's own (Proposal.params), by field name
    return None if record == proposal_settings() else record


@dataclass(frozen=True)
class SearchParams(Params):
    """The byte-synchronous beam's parameters, of a scoring that runs it (``beam``, ``prefix``, ``with-end``,
    ``conditional``): its :attr:`search` is built from them.

    The three lazy-extension shares go together: none given, the search takes :attr:`lazy_default` (the scoring's
    measured default; ``None``: every kept prefix run), or none with ``exhaustive``; any given, the others take
    :class:`~ppl_tok.strings.StringSearchConfig`'s (``extend_threshold`` 0, the others ``None``). In Python the
    whole search may be given instead (``ScoringConfig("beam", search=StringSearchConfig(...))``, :meth:`expand`).
    """

    #: the lazy shares when none is given and not ``exhaustive`` (``None``: no lazy extension)
    lazy_default: ClassVar[Mapping[str, float | None] | None] = None
    #: a scoring of documents: prunes against the offset only
    documents: ClassVar[bool] = True

    beam: int = param(StringSearchConfig.beam, "hypotheses kept per byte offset", flag="--beam", type=POSITIVE,
                      limit="beam")
    prune: float = param(StringSearchConfig.prune, "drop hypotheses this many nats below the best at their offset "
                         "(inf: rank only)", flag="--prune", type=positive_or_inf, metavar="NATS", limit="prune_nats")
    budget: int | None = param(None, "token forwards per window, past which the beam narrows to one prefix (None: no "
                               "limit)", flag="--search-budget", type=POSITIVE, aliases=("--budget",),
                               metavar="FORWARDS", limit="search_forwards")
    extend_threshold: float | None = param(
        None, "lazy extension: run a prefix only if it holds at least this share of the text's mass at its offset "
        "(none of the three shares given: the scoring's default)", flag="--extend-threshold", type=share,
        metavar="SHARE")
    boundary_threshold: float | None = param(
        None, "lazy extension's share at the canonical tokenization's token boundaries", flag="--boundary-threshold",
        type=share, metavar="SHARE")
    rejoin_threshold: float | None = param(
        None, "lazy extension's share for a split path's first prefix back on the canonical boundaries",
        flag="--rejoin-threshold", type=share, metavar="SHARE")
    exhaustive: bool = param(False, "run every kept prefix through the LM (no lazy extension)", flag="--exhaustive")
    prune_against: str = param("offset", "what prune is measured from (StringSearchConfig)", choices=("offset", "text"))
    prefill: str = param(StringSearchConfig.prefill, "how a prompt is conditioned on (ppl_tok.strings.prefill)",
                         choices=PREFILL_MODES)
    prefill_tail: int | None = param(None, "the fewest bytes the prefill's tail holds (None: no minimum)",
                                     type=POSITIVE)

    def __post_init__(self) -> None:
        super().__post_init__()
        given = [f for f in LAZY_FIELDS if getattr(self, f) is not None]
        if self.exhaustive and given:
            flag = next(s.flag for s in specs(self) if s.name == given[0])
            raise ValueError(f"--exhaustive runs every kept prefix but {flag} sets lazy extension: give one or "
                             f"the other (exhaustive=True, {given[0]}=...)")
        if self.documents and self.prune_against != "offset":
            raise ValueError(f"the beam scoring prunes against the offset only, got "
                             f"prune_against={self.prune_against!r}")
        self.search  # noqa: B018 - the search's own checks

    @property
    def lazy(self) -> dict[str, float | None]:
        """The lazy-extension shares the search runs with (``{}``: none)."""
        if any(getattr(self, f) is not None for f in LAZY_FIELDS):
            return {"extend_threshold": self.extend_threshold or 0.0, "boundary_threshold": self.boundary_threshold,
                    "rejoin_threshold": self.rejoin_threshold}
        return {} if self.exhaustive or self.lazy_default is None else dict(self.lazy_default)

    @property
    def search(self) -> StringSearchConfig:
        """The byte-synchronous beam's search these parameters give."""
        return StringSearchConfig(beam=self.beam, prune=self.prune, budget=self.budget,
                                  prune_against=self.prune_against, prefill=self.prefill,
                                  prefill_tail=self.prefill_tail, **self.lazy)

    @classmethod
    def expand(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` with a whole ``search`` (a :class:`~ppl_tok.strings.StringSearchConfig`, Python) turned into
        the fields: its lazy shares where it has lazy extension, else ``exhaustive``.

        :raises ValueError: ``search`` with one of the fields it sets, or with ``exhaustive`` and lazy extension.
        """
        out = dict(values)
        search = out.pop("search", None)
        if search is None:
            return out
        if not isinstance(search, StringSearchConfig):
            raise TypeError(f"search must be a StringSearchConfig, got {search!r}")
        exhaustive = out.pop("exhaustive", False)
        if exhaustive and search.lazy:
            raise ValueError(f"exhaustive=True runs every kept prefix, but search has lazy extension "
                             f"({search.lazy_settings()}): give one or the other")
        own = {f.name: getattr(search, f.name) for f in fields(search) if f.name not in LAZY_FIELDS}
        own.update({f: getattr(search, f) for f in LAZY_FIELDS} if search.lazy else {"exhaustive": True})
        both = sorted(set(own) & set(out))
        if both:
            raise ValueError(f"give search or {', '.join(both)}, not both (search sets them)")
        return {**out, **own}


def check_limits(fields_: Iterable[Spec], values: Mapping[str, Any], named: Callable[[Spec], str]) -> None:
    """The values given (a command's flags, ``--model_args``, by field name) of the fields that have a memory limit
    (``ppl_tok.limits``), checked against it before any work; ``named(spec)`` says how a value was given.

    :raises ppl_tok.limits.LimitError: a value over its limit (a real number: its ceiling, named with its unit, the
        field's metavar: ``--prune (nats)``).
    """
    import math

    from ppl_tok.limits import limits

    lim = limits()
    for spec in fields_:
        value = values.get(spec.name)
        if spec.limit is None or value is None or isinstance(value, bool):
            continue
        real = isinstance(value, float)
        lim.check(spec.limit, math.ceil(value) if real and math.isfinite(value) else value,
                  named(spec) + (f" ({spec.metavar.lower()})" if real and spec.metavar else ""))


__all__ = ["BEAM_LAZY_DEFAULT", "DEFAULT_SAMPLES", "LAZY_FIELDS", "SearchParams", "check_limits", "proposal_param",
           "proposal_value", "samples_param", "seed_param"]
