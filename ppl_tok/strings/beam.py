"""The byte-synchronous beam: the search engine of the LM over strings.

A tokenization of a string ``x`` (or of a prefix of the output that covers
``x``) is a path of tokens through the byte offsets ``0..|x|``. The best-first
bracket of :mod:`ppl_tok.infer.search` ranks *all* open prefixes by probability, so
it prefers short prefixes and widens across the first bytes of a long string.
Here prefixes are compared only with prefixes that end at the **same byte
offset** (as genlm-bytes' beam does): the engine sweeps the offsets left to
right, and at the smallest open offset ``i`` it

1. ranks the hypotheses (token prefixes spelling exactly ``x[:i]``) by their
   prefix probability ``p(v_1..v_k | c)``;
2. keeps the ``beam`` most probable ones within ``prune`` nats of the best,
   plus the hypothesis on the canonical path (so the canonical tokenization is
   always completed and the mass found is never below it);
3. runs the kept hypotheses' last tokens through the LM in **one** batched
   :meth:`~ppl_tok.lm.base.LanguageModel.extend`, gathering on the device the
   log-probs of the tokens that may follow at ``i`` (the MDD's out-edges).

Each dropped hypothesis ``h`` adds its prefix probability to the pruned mass:
all completions of a prefix together weigh at most the prefix, so

    found  <=  p(x | c)  <=  found + sum over pruned h of p(h)

is a certified bracket, for any beam, threshold and budget.

**Lazy extension** (``extend_threshold`` ``s`` in ``[0, 1)``). Running a
hypothesis through the LM is the whole cost, and most hypotheses at an offset
inside a word (a split of it) hold a negligible share of the text's mass. With
``M_i`` the *text's mass at offset* ``i``, a hypothesis ``h`` ending at ``i``
is extended only if

    p(h)  >=  s * M_i,

(the canonical one always is, as the most probable one is at ``s = 0``); one
not extended is dropped with ``p(h)`` added to the pruned mass, so the bracket
stays certified. ``M_i`` is the mass the beam carries for the text up to ``i``:
in a sweep over a whole string (:mod:`ppl_tok.strings.marginal`), the
**frontier**, the hypotheses open at ``i`` and beyond when ``i`` is settled
(every tokenization the beam still follows passes through exactly one of
them: their last tokens all start before ``i``); in a next-byte walk
(:mod:`ppl_tok.strings.state`), the prefix probability found ``P^(x[:i])``.
Unlike ``prune`` (measured from the best hypothesis *at the offset*, which
always keeps one), this skips whole offsets: where no token boundary is likely
no hypothesis reaches ``s * M_i`` and the offset costs no forward, so the
forwards per byte fall from about ``beam`` towards (tokens per byte) x (kept
hypotheses), as CharacterBeam's end-of-token threshold does (Vieira et al.).
**Three shares.** Where the beam keeps a canonical tokenization (a marginal's
sweep; a walk given ``keep``), ``s`` may differ by where ``h`` ends:
``extend_threshold`` inside a canonical token (a split, which its next token
usually kills), ``boundary_threshold`` at a canonical boundary (a path that
has rejoined the canonical one, whose share predicts the gain it carries), and
``rejoin_threshold`` for the first prefix back on the boundaries after a split
(whose share swings most). Every one of them only decides what is run; what is
not run is pruned, so the bracket is certified under any of them.

"Not extended" *is* pruned here (a prefix that is never run has no
continuations to sum); the knob is a share of the text's mass, where ``prune``
is a distance from the offset's best. The per-offset cap is ``beam`` itself:
every kept hypothesis is extended, so a cap below it would only be a narrower
beam. ``s = 0`` is today's beam exactly (the floor ``log s + log M_i`` is
``-inf``). A byte offset that
no vocabulary token spans is a synchronisation point: every tokenization has a
boundary there, and the sweep compares all surviving paths at once. At most
``beam + 1`` hypotheses are run per offset, so the cost per byte does not grow
with the string's length.

**Long strings.** A prefix probability conditions on the whole string, so the
beam does not window: a hypothesis whose tokens (BOS and context included)
would take more positions than the model's context window
(:func:`~ppl_tok.lm.base.model_window`) raises :class:`ContextLengthError`
instead of being scored out of distribution. Cut the prompt to its last bytes
to condition on less (the conditional then is ``p(y | that tail)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ppl_tok.common.logspace import logsumexp

if TYPE_CHECKING:  # torch is imported when a beam runs, not when StringSearchConfig's defaults are read (--help)
    from ppl_tok.lm.base import LanguageModel, LMState


#: how a prompt is conditioned on (:class:`StringSearchConfig`'s ``prefill``; :mod:`ppl_tok.strings.prefill`)
PREFILL_MODES = ("auto", "exact", "canonical-head")
#: ``prefill="auto"`` takes ``canonical-head`` when the head holds at least this many canonical tokens
AUTO_HEAD_TOKENS = 8


class ContextLengthError(ValueError):
    """A token prefix of the string is longer than the model's context window."""


@dataclass(frozen=True)
class StringSearchConfig:
    """The accuracy/speed controls of the byte-synchronous beam (validated).

    The one place of the beam's defaults (beam 8, prune 12 nats, the studies'
    setting): the ``beam`` scoring of :mod:`ppl_tok.perplexity`, lm-eval's
    ``beam``/``prune`` model arguments, the benchmarks and the commands' flags
    hold or build one of these. A narrower beam does not keep the marginal's
    gain (docs/results.md's knob table: beam 4, prune 4 runs 6.7x canonical
    scoring's token-forwards but found 3% of beam 8's gain on the 600-byte
    benchmark document). Lazy extension with three shares
    (``extend_threshold=0.2, boundary_threshold=1e-3, rejoin_threshold=1e-6``)
    kept 91.7% of it at 3.24x on held-out SocialIQA documents but 47.6% at 4.77x
    on the whole 50-document benchmark, where paths far below the canonical
    one overtake it hundreds of bytes later (docs/benchmarks.md); this
    class's default stays the studies' setting (every kept prefix run). The
    ``beam`` scoring of documents defaults to a measured lazy setting instead
    (:data:`ppl_tok.scorings.registry.BEAM_LAZY_DEFAULT`, docs/perplexity.md).

    :param beam: the most hypotheses (token prefixes ending at the same byte
        offset) kept per offset, besides the canonical one; each costs one
        token forward. Larger is tighter and slower.
    :param prune: nats; a hypothesis more than this below the best one at its
        offset is dropped (``math.inf``: rank only). Its probability goes to
        the upper bound, so the bracket stays certified.
    :param budget: token forwards per search (``None``: no limit). Past it the
        beam narrows to the best hypothesis and the canonical one, so the search
        still reaches the end of the string and the bracket still holds.
    :param prune_against: what ``prune`` is measured from: ``"offset"``, the best
        hypothesis ending at the same offset; or ``"text"`` (next-byte walks,
        :class:`~ppl_tok.strings.state.StringState` only), also the mass found of
        the text up to the offset, ``P^(x[:i])``, as genlm-bytes' threshold is: a
        hypothesis far below the text's probability is dropped even when it is
        the best at its offset (a split inside a word), so far fewer offsets
        cost a forward. The beam can then drop every prefix that spells the
        next byte (a dead end); the state heals it by reviving the prefixes
        dropped in the last ``longest token`` bytes and sweeping those bytes
        again (:attr:`~ppl_tok.strings.state.StringState.heals` counts them).
    :param prefill: how a prompt is conditioned on (:mod:`ppl_tok.strings.prefill`):
        ``"exact"``, the beam over the whole prompt, ``P(x | c)``; ``"canonical-head"``,
        the prompt's canonical tokens up to a back-off point (the *head* ``h*``) run in
        one batched prefill forward and the beam over the *tail* only, which gives the
        LM over strings conditioned on "the head is tokenized canonically",
        ``P(x, head canonical | c) = p(h* | c) P(tail | c h*)`` (equal to ``exact``
        where the head is empty; otherwise a different conditional, bracketed by the
        beam on its own quantity); ``"auto"`` (default), ``canonical-head`` when the
        head holds at least :data:`AUTO_HEAD_TOKENS` (8)
        canonical tokens, else ``exact``. A walk with no prompt (bytes fed one by one
        to a :class:`~ppl_tok.strings.state.StringState`) is always exact.
    :param extend_threshold: lazy extension (module docstring): a hypothesis is run
        through the LM only if its probability is at least this share of the text's
        mass at its offset (``0``: every kept hypothesis, today's beam; e.g. ``1e-3``).
        One not run is pruned (its mass goes to the upper bound).
    :param boundary_threshold: lazy extension's share for a hypothesis ending where the canonical
        tokenization the beam keeps has a token boundary (a path that has rejoined it), when that should
        differ from ``extend_threshold``, which then applies inside canonical tokens only (``None``: the
        same share everywhere). Rejoined paths carry the gain and their share predicts it; a split inside a
        canonical token usually dies at its next token, so ``extend_threshold=0.1, boundary_threshold=3e-5``
        runs far fewer forwards than one share for both at the same gain (docs/benchmarks.md, the knob table).
        Offsets where no canonical tokenization is known (a next-byte walk without ``keep``) use ``extend_threshold``.
    :param rejoin_threshold: the share at the boundaries for a *rejoining* hypothesis: its last token ends at a
        canonical boundary and its previous one inside a canonical token (a split path's first prefix back on
        the canonical boundaries; ``None``: ``boundary_threshold``). A rejoining path's share can swing by orders
        of magnitude over its next tokens (one measured at 6e-5 of the text's mass rose to 1.7e-2 four bytes on
        and carried 0.87 of the canonical mass), so a low share here gives it one token's grace, at the cost of
        one forward per rejoining prefix.
    :param prefill_tail: the fewest bytes the tail holds (``None``: no minimum). Whatever it is, the tail
        reaches back to the earliest offset from which a token can run past the end of the prompt
        (:func:`~ppl_tok.strings.prefill.reach`), so no covering of the prompt's end is cut by the head.
    """

    beam: int = 8
    prune: float = 12.0
    budget: int | None = None
    prune_against: str = "offset"
    prefill: str = "auto"
    prefill_tail: int | None = None
    extend_threshold: float = 0.0
    boundary_threshold: float | None = None
    rejoin_threshold: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.beam, bool) or not isinstance(self.beam, int) or self.beam < 1:
            raise ValueError(f"beam must be a positive number of hypotheses per byte offset, got {self.beam!r}")
        if isinstance(self.prune, bool) or not isinstance(self.prune, (int, float)) or not self.prune > 0:
            raise ValueError(f"prune must be a positive number of nats (math.inf: no threshold), got {self.prune!r}")
        if self.budget is not None and (isinstance(self.budget, bool) or not isinstance(self.budget, int)
                                        or self.budget < 1):
            raise ValueError(f"budget must be a positive number of token forwards or None, got {self.budget!r}")
        if self.prune_against not in ("offset", "text"):
            raise ValueError(f"prune_against must be 'offset' or 'text', got {self.prune_against!r}")
        if self.prefill not in PREFILL_MODES:
            raise ValueError(f"prefill must be one of {', '.join(map(repr, PREFILL_MODES))} (how a prompt is "
                             f"conditioned on), got {self.prefill!r}")
        if (isinstance(self.extend_threshold, bool) or not isinstance(self.extend_threshold, (int, float))
                or not 0 <= self.extend_threshold < 1):
            raise ValueError(f"extend_threshold must be a share of the text's mass in [0, 1) (0: extend every kept "
                             f"prefix), got {self.extend_threshold!r}")
        for name, fallback in (("boundary_threshold", "extend_threshold"), ("rejoin_threshold", "boundary_threshold")):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1):
                raise ValueError(f"{name} must be a share of the text's mass in [0, 1) or None ({fallback}'s), "
                                 f"got {v!r}")
        if self.prefill_tail is not None and (isinstance(self.prefill_tail, bool)
                                              or not isinstance(self.prefill_tail, int) or self.prefill_tail < 1):
            raise ValueError(f"prefill_tail must be a positive number of bytes or None (no minimum), "
                             f"got {self.prefill_tail!r}")

    @property
    def lazy(self) -> bool:
        """Whether lazy extension is on (a share above zero anywhere)."""
        return self.extend_threshold > 0 or bool(self.boundary_threshold) or bool(self.rejoin_threshold)

    def share(self, at_boundary: bool, rejoining: bool = False) -> float:
        """Lazy extension's share for a hypothesis ending inside a canonical token or at one of its boundaries
        (``rejoining``: there, with its previous token ending inside one)."""
        if at_boundary and rejoining and self.rejoin_threshold is not None:
            return self.rejoin_threshold
        if at_boundary and self.boundary_threshold is not None:
            return self.boundary_threshold
        return self.extend_threshold

    def lazy_settings(self) -> dict[str, float]:
        """The lazy-extension settings a store records: ``extend_threshold``, and ``boundary_threshold`` and
        ``rejoin_threshold`` when set (absent from folders written before they existed, which therefore resume)."""
        out = {"extend_threshold": self.extend_threshold}
        for name in ("boundary_threshold", "rejoin_threshold"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


class Hypothesis:
    """A token prefix spelling the string's bytes up to its offset, with its log prefix probability.

    ``state`` is the LM state after the prefix once it has been run (``None``
    while pending: then ``parent`` and ``token`` say how to run it).
    """

    __slots__ = ("log_prob", "state", "parent", "token", "canonical", "back")

    def __init__(self, log_prob: float, *, state: LMState | None = None, parent: LMState | None = None,
                 token: int = -1, canonical: bool = False, back: Hypothesis | None = None):
        self.log_prob = log_prob
        self.state = state
        self.parent = parent
        self.token = token
        self.canonical = canonical
        self.back = back

    def tokens(self) -> tuple[int, ...]:
        """The token ids of the prefix (the context excluded)."""
        out = []
        h: Hypothesis | None = self
        while h is not None and h.token >= 0:
            out.append(h.token)
            h = h.back
        return tuple(reversed(out))

    def child(self, token: int, log_prob: float, canonical: bool) -> Hypothesis:
        return Hypothesis(log_prob, parent=self.state, token=token, canonical=canonical, back=self)


class ByteBeam:
    """Hypotheses grouped by the byte offset where they end, swept left to right.

    :param lm: the LM.
    :param root: the LM state after BOS and the context (offset 0).
    :param config: the beam's controls.
    :param canonical: the canonical tokens' start offsets: ``{offset: token}``
        (a hypothesis is canonical when all its tokens are).
    :param start: the byte offset of the root (a canonical head's length: :mod:`ppl_tok.strings.prefill`).
    :param log_prob: the root's log-probability (``log p(h* | c)`` after a canonical head).
    """

    def __init__(self, lm: LanguageModel, root: LMState, config: StringSearchConfig,
                 canonical: dict[int, int] | None = None, start: int = 0, log_prob: float = 0.0):
        self.lm, self.config = lm, config
        self.canonical_at = canonical or {}
        self.open: dict[int, list[Hypothesis]] = {start: [Hypothesis(log_prob, state=root, canonical=True)]}
        self.pruned: list[float] = []
        from ppl_tok.lm.base import model_window

        self.window = model_window(lm)
        self._check_length(len(root.tokens))
        self.dtype = root.log_probs.dtype  # the rows' dtype: what their rounding is (:mod:`ppl_tok.strings.certified`)
        self.root_length = len(root.tokens)
        self.depth = 0  # the most tokens past the root of any prefix run so far
        self.forwards = 0  # token positions this beam asked the LM to run (cache hits included)
        self.kept = 0
        #: hypotheses dropped by :meth:`settle`, by offset, kept for :meth:`revive` while ``keep_dropped`` is
        #: a number of bytes (``None``: not kept); their mass is in :attr:`pruned` until revived
        self.dropped: dict[int, list[Hypothesis]] = {}
        self.keep_dropped: int | None = None

    def copy(self) -> ByteBeam:
        """An independent beam over the same hypotheses (the containers copied, the hypotheses shared)."""
        new = object.__new__(ByteBeam)
        new.__dict__.update(self.__dict__)
        new.open = {o: list(hs) for o, hs in self.open.items()}
        new.pruned = list(self.pruned)
        new.dropped = {o: list(hs) for o, hs in self.dropped.items()}
        return new

    def push(self, offset: int, hyp: Hypothesis) -> None:
        """Add a hypothesis ending at ``offset`` (zero-probability ones carry no mass and are dropped)."""
        if hyp.log_prob > -math.inf:
            self.open.setdefault(offset, []).append(hyp)

    def branch(self, parent: Hypothesis, offset: int, token: int, log_prob: float) -> Hypothesis:
        """The child of ``parent`` (ending at ``offset``) by ``token`` of next-token log-prob ``log_prob``."""
        return parent.child(token, parent.log_prob + log_prob,
                            parent.canonical and self.canonical_at.get(offset) == token)

    def lazy_floor(self, text_mass: float, offset: int | None = None, rejoining: bool = False) -> float:
        """``log s + log M_i``: the log-probability below which a hypothesis ending at ``offset`` is not extended
        (``-inf`` at ``s = 0``); ``s`` is the config's :meth:`~StringSearchConfig.share` there."""
        share = self.config.share(offset is not None and offset in self.canonical_at, rejoining)
        return math.log(share) + text_mass if share > 0 else -math.inf

    def frontier_mass(self, hyps: Sequence[Hypothesis]) -> float:
        """``log M_i`` of a sweep: ``hyps`` (those ending at ``i``) and every hypothesis open beyond ``i``."""
        return logsumexp([h.log_prob for h in hyps] + self.pending_mass())

    def rejoins(self, h: Hypothesis, offset: int) -> bool:
        """Whether ``h`` (ending at the canonical boundary ``offset``) is a split path's first prefix back on the
        canonical boundaries: its last token starts inside a canonical token."""
        return (not h.canonical and h.token >= 0
                and offset - len(self.lm.vocab[h.token] or b"") not in self.canonical_at)

    def _select(self, hyps: list[Hypothesis], floor: float, rejoin_floor: float | None = None,
                offset: int = 0) -> tuple[list[Hypothesis], list[Hypothesis]]:
        hyps = sorted(hyps, key=lambda h: -h.log_prob)
        spent = self.config.budget is not None and self.forwards >= self.config.budget
        width = 1 if spent else self.config.beam
        pruned_below = hyps[0].log_prob - self.config.prune  # ``prune`` nats below the offset's best
        floor = max(floor, pruned_below)
        keep, drop = [], []
        for rank, h in enumerate(hyps):
            f = max(rejoin_floor, pruned_below) if rejoin_floor is not None and self.rejoins(h, offset) else floor
            (keep if (rank < width and h.log_prob >= f) or h.canonical else drop).append(h)
        return keep, drop

    def select(self, offset: int, floor: float = -math.inf, text_mass: float | None = None) -> list[Hypothesis]:
        """Prune the hypotheses ending at ``offset`` and return the kept ones (not yet run: :func:`run_kept`).

        ``floor``: a log-probability below which a (non-canonical) hypothesis is dropped
        whatever its rank. ``text_mass``: ``log M_i`` for lazy extension (module docstring;
        ``None``: the frontier, :meth:`frontier_mass`, computed only when lazy extension is on).
        """
        hyps = self.open.pop(offset, [])
        if not hyps:
            return []
        rejoin_floor = None
        if self.config.lazy:
            mass = self.frontier_mass(hyps) if text_mass is None else text_mass
            if self.config.rejoin_threshold is not None and offset in self.canonical_at:
                rejoin_floor = max(floor, self.lazy_floor(mass, offset, rejoining=True))
            floor = max(floor, self.lazy_floor(mass, offset))
        keep, drop = self._select(hyps, floor, rejoin_floor, offset)
        self.pruned.extend(h.log_prob for h in drop)
        if self.keep_dropped is not None:
            if drop:
                self.dropped[offset] = drop
            for old in [o for o in self.dropped if o < offset - self.keep_dropped]:
                del self.dropped[old]  # too far back to keep: their mass stays in the pruned mass for good
        self.kept += len(keep)
        return keep

    def settle(self, offset: int, want: Sequence[int] | None = None, floor: float = -math.inf,
               text_mass: float | None = None) -> list[Hypothesis]:
        """Prune the hypotheses ending at ``offset`` and run the kept ones through the LM.

        One batched forward for all of them; the log-probs of ``want`` (the tokens
        that may follow at ``offset``) are gathered on the device with it and are
        then read from each state's ``known``. ``floor``, ``text_mass``: as in :meth:`select`.
        """
        keep = self.select(offset, floor, text_mass)
        run_kept(self.lm, [(self, keep, want)])
        return keep

    def revive(self) -> list[int]:
        """Put every kept dropped hypothesis back into :attr:`open` (its mass leaves the pruned mass).

        Returns the offsets revived, in order. The caller settles them again (a dead-end heal:
        :meth:`ppl_tok.strings.state.StringState.extend`).
        """
        offsets = sorted(self.dropped)
        self._pruned_memo = None  # the list shrinks here
        for offset in offsets:
            for h in self.dropped[offset]:
                self.pruned.remove(h.log_prob)
                self.open.setdefault(offset, []).append(h)
        self.dropped = {}
        return offsets

    def _check_length(self, positions: int) -> None:
        if self.window is not None and positions > self.window:
            raise ContextLengthError(
                f"a tokenization of the string needs {positions} token positions (BOS and context included), "
                f"more than {self.lm.name}'s context window of {self.window}: the LM over strings conditions on the "
                "whole string and does not window; shorten the prompt (e.g. keep its last bytes)")

    def tolerance(self, extra_terms: int = 1) -> float:
        """The rounding tolerance (nats) of this beam's brackets: :func:`~ppl_tok.common.rounding.tolerance` of its
        rows' dtype over its deepest prefix plus ``extra_terms`` rows (the token that completes or covers), kept."""
        terms = self.depth + extra_terms
        memo = self.__dict__.setdefault("_tolerances", {})
        value = memo.get(terms)
        if value is None:
            from ppl_tok.strings.certified import tolerance

            value = memo[terms] = tolerance(self.dtype, terms, len(self.lm.vocab))
        return value

    def pruned_log_mass(self) -> float:
        """The log-sum-exp of :attr:`pruned` (``-inf``: nothing pruned), kept until the list changes (it only
        grows, but in :meth:`revive` and a checkpoint's restore, which replaces it)."""
        memo = self.__dict__.get("_pruned_memo")
        if memo is None or memo[0] is not self.pruned or memo[1] != len(self.pruned):
            memo = self._pruned_memo = (self.pruned, len(self.pruned), logsumexp(self.pruned))
        return memo[2]

    def pending_mass(self) -> list[float]:
        """Log-probs of the hypotheses not yet settled (they bound everything below them)."""
        return [h.log_prob for hs in self.open.values() for h in hs]


def needs_forward(lm: LanguageModel, kept: Sequence[Hypothesis]) -> bool:
    """Whether running ``kept`` (:func:`run_kept`) would make an LM call: a pending hypothesis whose state
    is not in the prefix cache with its row."""
    return any(h.state is None and not lm.has_state(h.parent.tokens + (h.token,)) for h in kept)


def run_kept(lm: LanguageModel, jobs: Sequence[tuple[ByteBeam, list[Hypothesis], Sequence[int] | None]]) -> None:
    """Run the kept hypotheses of one or more beams that still need a forward, in one batched LM call.

    ``jobs``: ``(beam, kept, want)`` per beam (``want``: the tokens whose log-probs will be
    read after each of its hypotheses, or ``None``). Beams of different strings share the
    call: on a CPU a one-token forward of a few rows costs about as much as of one row (the
    weights are read once), so sweeping several strings in lockstep
    (:func:`ppl_tok.strings.marginal.string_marginals`) runs far fewer forwards.
    """
    owners: list[Hypothesis] = []
    wants: list[list[int]] = []
    for beam, kept, want in jobs:
        pending = [h for h in kept if h.state is None]
        if not pending:
            continue
        longest = max(len(h.parent.tokens) for h in pending) + 1
        beam._check_length(longest)
        beam.depth = max(beam.depth, longest - beam.root_length)
        beam.forwards += len(pending)
        owners += pending
        wants += [[] if want is None else list(want)] * len(pending)
    if not owners:
        return
    states = lm.extend([h.parent for h in owners], [h.token for h in owners],
                       wants if any(wants) else None)
    for h, state in zip(owners, states):
        h.state = state
        h.parent = None  # the parent state is no longer needed: let the caches forget it
