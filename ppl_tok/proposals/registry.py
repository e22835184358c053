"""Every proposal by name: what ``--proposal NAME``, lm-eval's ``proposal=``, perplexity's ``canonical+rest`` and the
QA study accept, what a run folder stores of one, and how a stored setting becomes a guide again."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppl_tok.common.params import NoParams, Params, from_settings, from_values
from ppl_tok.common.params import settings as settings_of
from ppl_tok.common.registry import Registry
from ppl_tok.proposals.guides import lookahead_guide, uniform_guide
from ppl_tok.proposals.learned import LearnedProposal

#: the proposal of a consumer that names none (``--proposal``'s default, lm-eval's ``proposal=``, a run's settings
#: that record none)
DEFAULT_PROPOSAL = "lookahead"


@dataclass(frozen=True)
class Proposal:
    """A registered proposal: what ``--proposal NAME``, lm-eval's ``proposal=`` and a run's settings name.

    :param name: its name.
    :param guide: the ``guide=`` of :func:`ppl_tok.infer.importance.marginals`: a Pyro guide over the model's
        sites (a user's own), a name the importance sampler implements itself (``"lookahead"``, ``"uniform"``,
        ``"stratified"``), or ``None`` (the LM prior, rejection).
    :param from_record: a proposal with parameters of its own (``learned``): the guide of a run's settings record
        (the parameters travel with the run, not a path); ``None``: :attr:`guide`.
    :param read_file: a proposal whose parameters are read from a file: the settings record's fields of that file
        (its checksum and weights, so that a resume under another file is refused); ``None``: it takes no file.
    :param doc: one line: what it draws.
    :param rejects: its draws may leave the MDD and are then rejected (the prior): its acceptance rate is a
        diagnostic a command shows.
    :param params: its own parameters, a frozen :class:`~ppl_tok.common.params.Params` dataclass (each field a
        default, one line of help, a type): given as ``--proposal-param NAME=VALUE`` on the command line, as
        ``proposal_NAME=VALUE`` in lm-eval's ``--model_args``, stored in a run's settings (``proposal_params``) and
        compared on resume (:func:`proposal_settings`).
    :param from_params: a proposal with parameters: its guide from them (``None``: :attr:`guide`).
    :param enumerates: the importance sampler enumerates what a certified search finds and samples the rest with
        this guide (``stratified``; :func:`ppl_tok.infer.importance.marginal` runs it text by text).
    """

    name: str
    guide: str | Callable[..., Any] | None = None
    from_record: Callable[[dict[str, Any]], Callable[..., Any]] | None = None
    read_file: Callable[[Path], dict[str, Any]] | None = None
    doc: str = ""
    rejects: bool = False
    params: type[Params] = NoParams
    from_params: Callable[[Any], Callable[..., Any]] | None = None
    enumerates: bool = False

    def __post_init__(self) -> None:
        if self.from_record is not None and self.from_params is not None:
            raise ValueError(f"proposal {self.name!r}: give from_record (parameters in a file) or from_params "
                             "(parameters of its own), not both")

    def own(self, values: Mapping[str, Any] | Params | None = None) -> Params:
        """Its parameters: ``values`` by field name (strings parsed by each field's type, as lm-eval's
        ``--model_args`` and ``--proposal-param`` give them; the others checked), or an instance of :attr:`params`.

        :raises ValueError: a name that is no parameter of this proposal, or a bad value (one line naming it).
        """
        if isinstance(values, Params):
            if not isinstance(values, self.params):
                raise ValueError(f"proposal {self.name!r} takes {self.params.__qualname__}, got "
                                 f"{type(values).__qualname__}")
            return values
        return from_values(self.params, values or {}, f"proposal {self.name!r}")

    def guide_of(self, record: dict[str, Any]) -> str | Callable[..., Any] | None:
        """The guide of a settings record of :func:`proposal_settings` naming this proposal."""
        if self.from_params is not None:
            return self.from_params(from_settings(self.params, record.get("proposal_params") or {},
                                                  f"proposal {self.name!r}"))
        return self.guide if self.from_record is None else self.from_record(record)


#: Every proposal by name (:class:`~ppl_tok.common.registry.Registry`): the built-in ones below, and a user's own
#: (:func:`register_proposal`); every consumer (``ppl-tok marginal``, perplexity's ``canonical+rest``, lm-eval, the
#: QA study) accepts any of them.
PROPOSALS: Registry[Proposal] = Registry("proposal", hint="add one with ppl_tok.proposals.register_proposal")


def register_proposal(proposal: Proposal, *, replace: bool = False) -> Proposal:
    """Register ``proposal`` under its name (``replace=True`` to shadow one of the same name, a built-in included;
    :func:`unregister_proposal` then restores it)."""
    if not isinstance(proposal, Proposal):
        raise TypeError(f"register_proposal takes a Proposal, got {proposal!r}")
    PROPOSALS.register(proposal.name, proposal, replace=replace)
    return proposal


def unregister_proposal(name: str) -> None:
    """Remove a registered proposal (a test's toy one, say); the one it shadowed is registered again."""
    PROPOSALS.unregister(name)


def proposal(name: str) -> Proposal:
    """The registered proposal ``name``; an unknown one is a ``ValueError`` naming the registered ones."""
    return PROPOSALS.lookup(name)


def _learned_file(file: Path) -> dict[str, Any]:
    import hashlib

    learned = LearnedProposal.load(file)  # a missing or foreign file: its one-line error, before any run starts
    return {"proposal_sha256": hashlib.sha256(Path(file).read_bytes()).hexdigest(),
            "proposal_weights": learned.weights.tolist(), "proposal_defensive": learned.defensive}


def _learned_guide(record: dict[str, Any]) -> Callable[..., Any]:
    if "proposal_weights" not in record:
        raise ValueError(f"a run's settings name the proposal {record.get('proposal')!r} without its weights: the "
                         "record is damaged or from another release; start a new run folder")
    return LearnedProposal(record["proposal_weights"], defensive=record.get("proposal_defensive")).guide


for _builtin in (
        Proposal("lookahead", "lookahead", doc="the LM's next-token distribution masked to the MDD (the default)"),
        Proposal("uniform", "uniform", doc="uniform over the MDD's paths"),
        Proposal("prior", None, doc="the LM prior, every draw that leaves the MDD rejected", rejects=True),
        Proposal("stratified", "stratified", doc="the look-ahead over what a certified search has not enumerated",
                 enumerates=True),
        Proposal("learned", from_record=_learned_guide, read_file=_learned_file,
                 doc="log-linear over edge features, weights from `ppl-tok learn-proposal` (a proposal file)")):
    PROPOSALS.register(_builtin.name, _builtin)


def named_guide(name: str) -> Callable[..., Any] | None:
    """The guide of ``guide=name`` in :func:`ppl_tok.infer.importance.marginals`: a registered proposal's own guide
    (``None``: the prior). A proposal built from a settings record (``learned``) or run by the sampler itself
    (``stratified``) is an error naming the fix."""
    found, own = proposal(name), {"lookahead": lookahead_guide, "uniform": uniform_guide}
    if found.from_params is not None:
        return found.guide_of({})  # its parameters' defaults
    if found.from_record is not None or (isinstance(found.guide, str) and found.guide not in own):
        raise ValueError(f"proposal {name!r} is not a plain guide: pass guide=ppl_tok.proposals.resolve_proposal"
                         f"({name!r}, ...) (its settings' guide), or use marginal()")
    return own.get(found.guide, found.guide) if isinstance(found.guide, str) else found.guide


def proposal_settings(name: str | None = DEFAULT_PROPOSAL, file: str | Path | None = None,
                      params: Mapping[str, Any] | Params | None = None) -> dict[str, Any]:
    """The settings record of a proposal: ``{"proposal": name}``, plus what its file holds (``learned``: the
    file's SHA-256 and weights) and, for a proposal with parameters of its own, their values
    (``"proposal_params"``, :meth:`Proposal.own` of ``params``; a proposal without them refuses any).

    A run stores it, so that a resume with another proposal file (another checksum) is refused, and
    rebuilds its guide from it (:func:`settings_guide`). A proposal that reads a file needs ``file``; the others
    refuse one (one-line errors naming the fix); an unknown name is an error naming the registered ones.
    """
    found = proposal(DEFAULT_PROPOSAL if name is None else name)
    check_file(found, file, "proposal {} and a proposal file")
    own = settings_of(found.own(params))
    return {"proposal": found.name, **({} if file is None else found.read_file(Path(file))),
            **({"proposal_params": own} if own else {})}


def check_file(found: Proposal, file: object, pair: str) -> None:
    """A proposal that reads a file is given one, and only such a proposal is: else a ``ValueError`` naming the
    pair (``pair``: how the setting reads, ``{}`` for the proposals that read files, ``"--proposal {} and
    --proposal-file F"``)."""
    if (found.read_file is not None) != (file is not None):
        readers = "|".join(n for n, p in PROPOSALS.items() if p.read_file is not None)
        raise ValueError(f"{pair.format(readers)} go together: give both (train the file with "
                         "`ppl-tok learn-proposal WORDS --out F`), or neither")


def settings_guide(record: dict[str, Any]) -> str | Callable[..., Any] | None:
    """The guide of a settings record of :func:`proposal_settings` (``"lookahead"`` where none is recorded)."""
    name = record.get("proposal", DEFAULT_PROPOSAL)
    try:
        found = proposal(name)
    except ValueError as err:
        raise ValueError(f"a run's settings name the proposal {name!r}, which is not registered here ({err}): "
                         "register it before the run, or start a new run folder") from None
    return found.guide_of(record)


def resolve_proposal(name: str = DEFAULT_PROPOSAL, file: str | Path | None = None,
                     params: Mapping[str, Any] | Params | None = None) -> str | Callable[..., Any] | None:
    """The ``guide=`` of :func:`ppl_tok.infer.importance.marginals` for a consumer's proposal setting: the one
    place ``ppl-tok marginal``, QA, perplexity and lm-eval turn ``proposal`` (and its file) into a guide (checked
    as :func:`proposal_settings` checks it)."""
    return settings_guide(proposal_settings(name, file, params))
