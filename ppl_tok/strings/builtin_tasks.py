"""The built-in string tasks (:mod:`ppl_tok.strings.tasks`): ``conditional``, ``next``, ``generate`` and
``surprisal``, each a :class:`~ppl_tok.strings.tasks.StringTask` with its own parameters and printer, registered in
this order. :mod:`ppl_tok.strings.tasks` imports this module (and re-exports its names): import them from there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ppl_tok.common.arguments import POSITIVE, SEED, integer, log_prob_floor, positive, top_mass
from ppl_tok.common.params import Params, param
from ppl_tok.strings.certified import WIDE_BITS
from ppl_tok.strings.chars import DEFAULT_MIN_LOG_PROB
from ppl_tok.strings.conditional_event import EventParams
from ppl_tok.strings.ensemble import Ensemble, ensemble_conditional
from ppl_tok.strings.state import StringState
from ppl_tok.strings.tasks import Item, Options, Shown, StringTask, item_seed, register_task


def _num(x: float | str | None) -> str:
    """A log-probability as a table prints it (a record's ``"-Infinity"`` as ``-inf``)."""
    import math

    from ppl_tok.common.records import decode_log

    x = decode_log(x)
    return "-inf" if x == -math.inf else f"{x:.4f}"



@dataclass(frozen=True)
class ConditionalTaskParams(EventParams):
    """``conditional``'s parameters (``ppl-tok conditional``'s flags of the same names): the event (declared once,
    :class:`~ppl_tok.strings.conditional_event.EventParams`) and the search."""

    search: str = param("walk", "walk (the byte-synchronous walk) or tree (one branch per unit of the text off the "
                        "canonical cache, its own estimand: ppl_tok.strings.conditional_tree)", flag="--search",
                        choices=("walk", "tree"))


#: what a record's ``joint_prefix`` brackets, by its event (the label ``ppl-tok conditional`` prints)
_JOINT = {"prefix": "is a prefix):   ", "boundary": "then a boundary): "}


_ENSEMBLE_EVENT = ("an ensemble's conditional is the prefix event's (the output begins with the text): add --event "
                   "prefix (event=\"prefix\"), or give one --model")


def _canonical_tokens(lm: Any, item: Item, options: Options) -> float:
    """``log p(canonical tokens of text | canonical tokens of context + prompt)``, the record's ``canonical_tokens``."""
    context, text = options.context + item.prompt, item.text or ""
    return lm.canonical_log_prob(text, context) if context else lm.canonical_log_prob(text)


@register_task
class Conditional(StringTask):
    """``log p(text | prompt, context)`` over strings under the event asked for, a certified interval, beside the
    canonical tokens' figure. The prefix event walks each item after the runner's walk of its prompt
    (:meth:`answer`); the boundary event (whose walk keeps each pair's canonical path) and ``search="tree"`` answer
    a batch's items together (:meth:`answer_items`), as Python's
    :func:`~ppl_tok.strings.conditional.conditionals_many` and
    :func:`~ppl_tok.strings.conditional_tree.conditionals_tree` do."""

    name = "conditional"
    doc = "log p(text | prompt) over strings with its certified interval"
    needs_text = True
    params = ConditionalTaskParams
    #: a folder written before the event was stored scored the prefix event
    implicit = {"event": "prefix"}

    def walks(self, options: Options) -> bool:
        own = self.own(options)
        return own.search == "tree" or own.event == "boundary"

    def check(self, options: Options, ensemble: bool) -> None:
        if ensemble and self.own(options).event != "prefix":
            raise ValueError(_ENSEMBLE_EVENT)

    def answer(self, target: StringState | Ensemble, item: Item, options: Options,
               on_bytes: Callable[[int], None] | None) -> dict[str, Any]:
        """The prefix event after the runner's walk of the prompt (one LM, or an ensemble)."""
        text = item.text or ""
        if isinstance(target, Ensemble):
            return ensemble_conditional(target, text, on_bytes).to_dict()
        from ppl_tok.strings.conditional import conditional_of

        result = conditional_of(target, text, on_bytes, event="prefix")
        return {**result.to_dict(), "prompt": item.prompt, "canonical_tokens": _canonical_tokens(target.lm, item, options)}

    def answer_items(self, lms: tuple[Any, ...], items: list[Item], options: Options) -> list[dict[str, Any] | ValueError]:
        """Every item's conditional under the event, together: through one token tree (``search="tree"``,
        :func:`~ppl_tok.strings.conditional_tree.conditionals_tree`) or one batched walk
        (:func:`~ppl_tok.strings.conditional.conditionals_many`); an item that fails is scored alone for its own
        error."""
        from ppl_tok.strings.conditional import conditionals_many
        from ppl_tok.strings.conditional_tree import conditionals_tree

        own = self.own(options)
        if len(lms) != 1:
            return [ValueError("--search tree scores under one LM, not an ensemble: use --search walk")
                    if own.search == "tree" else ValueError(_ENSEMBLE_EVENT)] * len(items)
        (lm,) = lms
        many = conditionals_tree if own.search == "tree" else conditionals_many

        def score(its: list[Item]) -> list[Any]:
            return many(lm, [it.prompt for it in its], [it.text or "" for it in its], options.context,
                        options.config, own.event)

        try:
            found: list[Any] = score(items)
        except ValueError:
            found = []
            for it in items:
                try:
                    found += score([it])
                except ValueError as err:
                    found.append(err)
        return [r if isinstance(r, ValueError) else
                {**r.to_dict(), "prompt": it.prompt, "canonical_tokens": _canonical_tokens(lm, it, options)}
                for it, r in zip(items, found)]

    def settings(self, options: Options) -> dict[str, Any]:
        """The event, and ``search`` under the tree (a walk's folder stores none, as before the task had it)."""
        own = self.own(options)
        return {"event": own.event, **({"search": "tree"} if own.search == "tree" else {})}

    def bytes_after(self, item: Item, options: Options) -> int:
        return len((item.text or "").encode("utf-8"))

    def shown(self, record: dict[str, Any], options: Options, shown: Shown) -> tuple[dict[str, Any], list[str]]:
        from ppl_tok.strings.certified import head_caveat

        r = record
        if shown.ensemble:
            lines = [f"prompt: {r['prompt']!r}   text: {r['text']!r}   {shown.head}",
                     f"log p(text | prompt), over strings: {_num(r['estimate'])}   "
                     f"{'' if r.get('head_bytes') else 'certified '}in [{_num(r['lower'])}, {_num(r['upper'])}]",
                     f"{r['forwards']} LM forwards"]
            if r.get("head_bytes"):
                lines.insert(2, head_caveat(r["head_bytes"]))
            return {}, lines
        pp, jp = r["prompt_prefix"], r["joint_prefix"]
        lines = [f"prompt: {r['prompt']!r}   text: {r['text']!r}   context: {options.context!r}   model: {shown.head}",
                 f"log p(text | prompt), over strings: {r['estimate']:.4f}   {'certified ' * r['certified']}in "
                 f"[{r['lower']:.4f}, {r['upper']:.4f}] (rounding tolerance {r['tolerance_nats']:.1e} nats included)",
                 f"  log P(prompt is a prefix):        [{pp['lower']:.4f}, {pp['upper']:.4f}]",
                 f"  log P(prompt+text {_JOINT[r.get('event', 'prefix')]}[{jp['lower']:.4f}, {jp['upper']:.4f}]",
                 f"log p(canonical tokens of text | canonical tokens of prompt): {r['canonical_tokens']:.4f}",
                 f"{r['forwards']} LM forwards, {r['seconds']:.1f} s (beam {options.config.beam}, prefill {r['prefill']}"
                 + (f": a canonical head of {r['head_bytes']} bytes, the conditional given it)" if r['head_bytes']
                    else ")")]
        caveat = head_caveat(r["head_bytes"])
        if caveat:
            lines.insert(2, "  " + caveat)
        if r["hint"]:
            lines.append(r["hint"])
        return {}, lines


@dataclass(frozen=True)
class NextParams(Params):
    """``next``'s parameters."""

    chars: bool = param(False, "UTF-8 characters instead of bytes", flag="--chars")
    min_log_prob: float = param(DEFAULT_MIN_LOG_PROB, "with --chars: leave partial characters below this unexplored "
                                "(-inf: none)", flag="--min-log-prob", type=log_prob_floor, metavar="NATS")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.min_log_prob != DEFAULT_MIN_LOG_PROB and not self.chars:
            raise ValueError("--min-log-prob applies to --chars only (the next-byte table explores nothing): "
                             "add --chars or drop --min-log-prob")


@register_task
class Next(StringTask):
    """The next byte's (or character's) distribution after the prompt, each entry a certified interval."""

    name = "next"
    doc = "the next-byte (or next-character) distribution after the prompt"
    params = NextParams

    def answer(self, target: StringState | Ensemble, item: Item, options: Options,
               on_bytes: Callable[[int], None] | None) -> dict[str, Any]:
        from ppl_tok.strings.chars import next_char_log_probs

        if isinstance(target, Ensemble):
            return {"prompt": item.prompt, "unit": "byte", **target.next_bytes().to_dict(), "forwards": target.forwards}
        own = self.own(options)
        prefix = target.prefix_log_prob()
        if own.chars:
            body = {"unit": "char", **next_char_log_probs(target, own.min_log_prob).to_dict()}
        else:
            body = {"unit": "byte", **target.next_byte_log_probs().to_dict(), "forwards": target.forwards}
        return {"prompt": item.prompt, **body, "prefix": prefix.to_dict(),
                "prefill": target.prefill, "head_bytes": target.base}

    def settings(self, options: Options) -> dict[str, Any]:
        """``chars`` and ``min_log_prob``; without ``chars`` the floor changes no number and is stored as ``None``
        (as folders of the command line before it was a parameter hold it, so that they resume)."""
        own = self.own(options)
        return {"chars": own.chars, "min_log_prob": own.min_log_prob if own.chars else None}

    def check(self, options: Options, ensemble: bool) -> None:
        if ensemble and self.own(options).chars:
            raise ValueError("--chars reads one LM's next characters: give one --model, or drop --chars")

    def shown(self, record: dict[str, Any], options: Options, shown: Shown) -> tuple[dict[str, Any], list[str]]:
        """The rows, most probable first (``shown.top`` of them; ``--json`` has them all); one LM's table flags
        each uninformative row and says what would narrow it (:func:`~ppl_tok.strings.certified.uninformative_hint`)."""
        import math

        from ppl_tok.common.records import decode_log
        from ppl_tok.strings.certified import head_caveat, uninformative_hint
        from ppl_tok.strings.chars import visible, visible_byte

        r = record
        unit = "character" if r["unit"] == "char" else "byte"
        rows: list[tuple[str, str, float, float, float]] = []  # (JSON key, shown name, log p, lower, upper)
        extra: list[str] = []
        if r["unit"] == "char":
            rows = [(c, visible(c), *map(decode_log, e)) for c, e in r["chars"].items()]
            if r["end"] is not None:
                rows.append(("end", "<end>", *map(decode_log, r["end"])))
            extra = [f"not a character or below {self.own(options).min_log_prob:g} nats: log p = {decode_log(r['other']):.4f}"]
            if r["partial"]:
                extra.insert(0, f"the prompt ends inside a character (bytes {bytes.fromhex(r['partial']).hex(' ')}): "
                                "the rows complete it")
        else:
            rows = [(k, "<end>" if k == "end" else visible_byte(int(k)), decode_log(v), decode_log(r["lower"][k]),
                     decode_log(r["upper"][k])) for k, v in r["log_probs"].items()]
        rows = sorted(rows, key=lambda row: -row[2])[:shown.top]
        if shown.ensemble:
            lines = [f"next {unit} after {r['prompt']!r} ({shown.head})",
                     f"{unit:>9} {'p':>8} {'log p':>9}   certified log p"]
            lines += [f"{name:>9} {math.exp(lp):>8.4f} {lp:>9.4f}   [{_num(lo)}, {_num(hi)}]"
                      for _, name, lp, lo, hi in rows]
            return {}, lines + extra
        config, prefix = options.config, r["prefix"]
        wide = [key for key, _, _, lo, hi in rows if uninformative_hint(hi - lo, config) is not None]
        hint = (uninformative_hint(max(hi - lo for *_, lo, hi in rows), config, prefill=r["prefill"],
                                   prompt_bytes=len(r["prompt"].encode("utf-8")) - r["head_bytes"]) if wide else None)
        lines = [f"next {unit} after {r['prompt']!r} ({shown.head}); log P(prompt is a prefix) in "
                 f"[{prefix['lower']:.4f}, {prefix['upper']:.4f}]; intervals include a rounding tolerance of "
                 f"{r['tolerance_nats']:.1e} nats",
                 f"{unit:>9} {'p':>8} {'log p':>9}   {'certified ' if not r['head_bytes'] else ''}log p"]
        caveat = head_caveat(r["head_bytes"], f"the next {unit}'s log p")
        if caveat:
            lines.insert(1, caveat)
        for key, name, lp, lo, hi in rows:
            lines.append(f"{name:>9} {math.exp(lp):>8.4f} {lp:>9.4f}   [{lo:.4f}, {hi:.4f}]"
                         + ("   uninformative" if key in wide else ""))
        lines += extra + ([hint] if hint else [])
        return {"informative": not wide, "uninformative_rows": wide, "hint": hint, "certified": caveat is None}, lines


@dataclass(frozen=True)
class GenerateParams(Params):
    """``generate``'s parameters (:func:`~ppl_tok.strings.generate.generate`'s)."""

    max_bytes: int = param(64, "bytes to generate at most (at most the generated_bytes limit, docs/limits.md)",
                           flag="--max-bytes", type=POSITIVE)
    temperature: float = param(1.0, "divide the next-byte log-probs by this", flag="--temperature", type=positive)
    top_p: float = param(1.0, "sample from the smallest set holding this mass", flag="--top-p", type=top_mass)
    greedy: bool = param(False, "take the most probable byte each time (not with --temperature or --top-p)",
                         flag="--greedy")
    seed: int = param(0, "random seed (each item of a file draws with its own, from this one and its index)",
                      flag="--seed", type=SEED)
    stop: tuple[str, ...] = param((), "end at any of these strings (the command line: --stop, repeatable)")
    mode: str = param("auto", "tokens: a covering of the prompt, then plain token sampling (fast); bytes: byte by "
                      "byte (needed by --temperature, --top-p, --greedy); auto: tokens where it applies",
                      flag="--mode", choices=("auto", "bytes", "tokens"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.stop, (str, list)):
            object.__setattr__(self, "stop", (self.stop,) if isinstance(self.stop, str) else tuple(self.stop))
        if self.greedy and (self.temperature != 1.0 or self.top_p != 1.0):
            raise ValueError("--greedy takes the most probable byte: --temperature and --top-p do not apply "
                             "(drop them, or drop --greedy to sample)")


@register_task
class Generate(StringTask):
    """A continuation of the prompt, drawn byte by byte or token by token (:func:`item_seed` per item)."""

    name = "generate"
    doc = "a continuation of the prompt, with its log-probability"
    params = GenerateParams

    def answer(self, target: StringState | Ensemble, item: Item, options: Options,
               on_bytes: Callable[[int], None] | None) -> dict[str, Any]:
        from ppl_tok.strings.generate import generate

        own = self.own(options)
        seed = item_seed(own.seed, item.index) if item.seed is None else item.seed
        g = generate(target, "", own.max_bytes, temperature=own.temperature, top_p=own.top_p,
                     greedy=own.greedy, seed=seed, stop=own.stop, progress=False, mode=own.mode)
        if on_bytes is not None:
            on_bytes(own.max_bytes)
        return {**g.to_dict(), "prompt": item.prompt, "seed": seed}

    def bytes_after(self, item: Item, options: Options) -> int:
        return self.own(options).max_bytes

    def check(self, options: Options, ensemble: bool) -> None:
        from ppl_tok.strings.generate import check_sampling, sampling_mode

        own = self.own(options)
        check_sampling(own.max_bytes, own.temperature, own.top_p, own.stop)
        sampling_mode(own.mode, own.temperature, own.top_p, own.greedy, ensemble)

    def shown(self, record: dict[str, Any], options: Options, shown: Shown) -> tuple[dict[str, Any], list[str]]:
        r = record
        if shown.ensemble:
            log_p = f"log p = {_num(r['log_prob'])}, " if r["mode"] == "bytes" else ""
            return {}, [r["prompt"] + r["text"], f"-- {r['bytes']} bytes ({r['stopped']}, {r['mode']} mode, "
                        f"{shown.head}), {log_p}{r['forwards']} LM forwards"]
        if r["mode"] == "bytes":
            log_p = f"log p = {r['log_prob']:.4f}, "
        else:
            log_p = f"log p >= {r['log_prob_lower']:.4f} (certified, from the tokens drawn), "
        rate = r["bytes"] / r["seconds"] if r["seconds"] > 0 else float("nan")
        own = self.own(options)
        return ({"greedy": own.greedy, "temperature": own.temperature, "top_p": own.top_p},
                [r["prompt"] + r["text"], f"-- {r['bytes']} bytes ({r['stopped']}, {r['mode']} mode), {log_p}"
                 f"{r['forwards']} LM forwards, {r['seconds']:.1f} s ({rate:.1f} bytes/s)"])


@dataclass(frozen=True)
class SurprisalParams(Params):
    """``surprisal``'s parameters (``ppl-tok surprisal``'s flags of the same names)."""

    units: str = param("word", "the units: word (the whitespace and punctuation rules of docs/strings.md), char "
                       "(UTF-8) or byte; an item's regions override it", flag="--units",
                       choices=("word", "char", "byte"), metavar="{word,char,byte}")
    keep_punctuation: bool = param(False, "words keep their punctuation (\" boat.\" one unit) instead of punctuation "
                                   "runs being units", flag="--keep-punctuation")
    wide: float = param(WIDE_BITS, "flag a certified bracket wider than this many bits as uninformative",
                        flag="--wide", type=positive, metavar="BITS")
    final: str = param("auto", "what the last unit is conditioned on: boundary (a boundary character or the end "
                       "follows, as for interior words: in a reading study a sentence is followed by more text), end "
                       "(the string ends), none (nothing), or auto: boundary for words and regions, end for char and "
                       "byte", flag="--final", choices=("auto", "boundary", "end", "none"),
                       metavar="{auto,boundary,end,none}")
    entropy: bool = param(False, "add next_token_entropy: the entropy in bits of the LM's next token after each unit's "
                          "canonical tokens, an approximation of the next word's, not one over strings "
                          "(docs/strings.md); one canonical prefill per item", flag="--entropy")
    search: str = param("walk", "walk (the byte-synchronous walk) or tree (one branch per unit off the canonical "
                        "cache)", flag="--search", choices=("walk", "tree"), metavar="{walk,tree}")
    tree_back_off: int = param(0, "with --search tree: the branch's head ends at least this many bytes before the "
                               "unit", flag="--tree-back-off", type=integer(0), metavar="BYTES")


def _final(own: SurprisalParams) -> str | None:
    """``final`` as :func:`~ppl_tok.strings.surprisal.surprisal_batch` takes it (``"auto"``: ``None``)."""
    return None if own.final == "auto" else own.final


@register_task
class Surprisal(StringTask):
    """Each unit's surprisal over strings (word-end corrected), its bracket and canonical figure; the item's
    units as :attr:`Options.units` (or its :attr:`Item.regions`) say, the last one followed as
    :attr:`Options.final` says; with :attr:`Options.entropy`, the next token's entropy after each unit."""

    name = "surprisal"
    doc = "the surprisal of each unit of the prompt over strings, beside its canonical figure"
    params = SurprisalParams
    walks_items = True
    ensembles = False

    def answer_items(self, lms: tuple[Any, ...], items: list[Item], options: Options) -> list[dict[str, Any] | ValueError]:
        from ppl_tok.strings.surprisal import WordRules, surprisal_batch

        (lm,) = lms
        own = self.own(options)
        rules = WordRules(split_punctuation=not own.keep_punctuation)
        units = [own.units if it.regions is None else [tuple(r) for r in it.regions] for it in items]
        texts = [it.prompt for it in items]
        from ppl_tok.strings.tree import TokenTree

        search = TokenTree(own.tree_back_off) if own.search == "tree" else own.search
        found = surprisal_batch(lm, texts, units=units, contexts=[options.context] * len(items),
                                config=options.config, rules=rules, wide=own.wide, final=_final(own),
                                search=search)
        out: list[dict[str, Any] | ValueError] = []
        for it, u, rows in zip(items, units, found):
            if isinstance(rows, Exception):
                out.append(rows if isinstance(rows, ValueError) else ValueError(f"{type(rows).__name__}: {rows}"))
                continue
            dicts = [r.to_dict() for r in rows]
            for d in dicts:  # no upper bound: "Infinity", as --json writes it
                d["upper"] = "Infinity" if d["upper"] == float("inf") else d["upper"]
            if own.entropy:
                from ppl_tok.strings.entropy import next_token_entropies

                (ents,) = next_token_entropies(lm, [it.prompt], units=[u], contexts=[options.context], rules=rules)
                dicts = [{**d, "next_token_entropy": h} for d, h in zip(dicts, ents)]
            out.append({"prompt": it.prompt, "units": dicts})
        return out

    def settings(self, options: Options) -> dict[str, Any]:
        """Its parameters as folders written before they were a dataclass store them (``wide`` as ``wide_bits``; a
        walk's without ``search`` and ``tree_back_off``), so that those folders resume."""
        own = self.own(options)
        tree = {"search": "tree", "tree_back_off": own.tree_back_off} if own.search == "tree" else {}
        return {"units": own.units, "keep_punctuation": own.keep_punctuation, "wide_bits": own.wide,
                "final": _final(own), "entropy": own.entropy, **tree}


__all__ = ["Conditional", "ConditionalTaskParams", "Generate", "GenerateParams", "Next", "NextParams", "Surprisal", "SurprisalParams"]
