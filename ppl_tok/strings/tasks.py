"""The string tasks: what the LM over strings answers after each prompt, each a registered object.

An **item** is a prompt string ``x`` (and, for a conditional, a text ``y``); a **task** answers it after the
same context ``c`` and beam settings (:class:`Options`) with one record:

* ``conditional``: ``log p(y | x, c)`` with its certified interval (:mod:`ppl_tok.strings.conditional`;
  under an ensemble :func:`~ppl_tok.strings.ensemble.ensemble_conditional`);
* ``next``: the next-byte distribution after ``x`` (or, with ``chars``, the next-character one);
* ``generate``: a continuation of ``x`` (:func:`~ppl_tok.strings.generate.generate`), drawn with the
  item's own seed (:func:`item_seed`), so that an item's draw depends on the run's seed and its index only;
* ``surprisal``: the surprisal of each unit of ``x`` (words, characters, bytes or the item's regions) over
  strings beside its canonical figure (:mod:`ppl_tok.strings.surprisal`): a task that walks a batch's items
  together (:attr:`StringTask.walks_items`), one LM call serving every walk waiting for a forward.

One runner asks every task the same way (:func:`ppl_tok.strings.batch.run_items`: one prompt, a file of them,
a resumable folder, Ray): a new task is one :class:`StringTask` subclass registered with
:func:`register_task` (docs/architecture.md, "Adding a string task").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ppl_tok.common.registry import Registry, class_registrar
from ppl_tok.common.seeds import pair_seed
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.certified import WIDE_BITS
from ppl_tok.strings.ensemble import Ensemble, ensemble_conditional
from ppl_tok.strings.state import StringState


@dataclass(frozen=True)
class Item:
    """One prompt (and, for a conditional, the text after it); ``where`` names its source (``file:line``)."""

    index: int
    prompt: str
    text: str | None = None
    where: str = ""
    #: surprisal: the item's regions, ``(start, end)`` character spans that tile the prompt (``None``: the units
    #: of :attr:`Options.units`)
    regions: tuple[tuple[int, int], ...] | None = None


@dataclass
class Options:
    """A task's settings: the context and beam (all tasks), ``chars``/``min_log_prob`` (next), and generation's."""

    context: str = ""
    config: StringSearchConfig = field(default_factory=StringSearchConfig)
    chars: bool = False
    min_log_prob: float = -12.0
    max_bytes: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False
    seed: int = 0
    stop: tuple[str, ...] = ()
    mode: str = "auto"
    units: str = "word"
    keep_punctuation: bool = False
    wide: float = WIDE_BITS
    final: str | None = None
    entropy: bool = False
    #: surprisal's search: ``"walk"`` (the byte-synchronous walk) or ``"tree"`` (:mod:`ppl_tok.strings.tree`, its
    #: back-off ``tree_back_off`` bytes)
    search: str = "walk"
    tree_back_off: int = 0

    def settings(self) -> dict[str, Any]:
        """The settings every task's numbers depend on: the context and the beam's (what a store compares)."""
        c = self.config
        return {"context": self.context, "beam": c.beam, "prune": c.prune, "budget": c.budget,
                "prune_against": c.prune_against, "prefill": c.prefill, "prefill_tail": c.prefill_tail,
                **c.lazy_settings()}


class StringTask:
    """One task: its name and what it answers after an item's prompt.

    :cvar name: the task's name (what a batch folder's ``run.json`` records as ``task``).
    :cvar doc: one line: what a record holds.
    :cvar needs_text: whether an item carries a text after its prompt (a conditional's).
    :cvar walks_items: the task walks a batch's items itself (:meth:`answer_items`) instead of being given each
        item's state after its prompt (:meth:`answer`).
    :cvar ensembles: whether the task answers under an ensemble of LMs.
    """

    name: ClassVar[str]
    doc: ClassVar[str] = ""
    needs_text: ClassVar[bool] = False
    walks_items: ClassVar[bool] = False
    ensembles: ClassVar[bool] = True

    def answer(self, target: StringState | Ensemble, item: Item, options: Options,
               on_bytes: Callable[[int], None] | None) -> dict[str, Any]:
        """The item's record (JSON-able; ``-inf`` allowed) from the state after its prompt (one LM, or an ensemble);
        ``on_bytes`` reports the bytes walked past the prompt. A ``ValueError`` is the item's own error."""
        raise NotImplementedError

    def answer_items(self, lms: tuple[Any, ...], items: list[Item], options: Options) -> list[dict[str, Any] | ValueError]:
        """:attr:`walks_items` tasks: the records of a batch's ``items`` (one per item, in order; a ``ValueError``
        is that item's own error), walked together under ``lms`` (one LM unless :attr:`ensembles`)."""
        raise NotImplementedError

    def settings(self, options: Options) -> dict[str, Any]:
        """The settings of this task beyond :meth:`Options.settings` that change its numbers."""
        return {}

    def bytes_after(self, item: Item, options: Options) -> int:
        """The bytes the task walks after the prompt (its progress)."""
        return 0

    def __repr__(self) -> str:
        return f"<string task {self.name!r}>"


#: Every string task by name, in registration order.
TASKS: Registry[StringTask] = Registry("task")


def _checked(task_class: type[StringTask]) -> StringTask:
    """An instance of ``task_class`` with a name and the method it answers by (:func:`register_task`)."""
    obj = task_class()
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{task_class.__qualname__}: set the class attribute name (a non-empty str)")
    if task_class.answer_items is StringTask.answer_items if obj.walks_items else task_class.answer is StringTask.answer:
        raise ValueError(f"string task {name!r} does not implement "
                         f"{'answer_items' if obj.walks_items else 'answer'}")
    return obj


#: Register a :class:`StringTask` subclass (a class decorator: ``@register_task``, or
#: ``@register_task(replace=True)`` to shadow a task of the same name, a built-in included); :func:`string_task`
#: returns its instance.
register_task = class_registrar(TASKS, _checked)


def unregister_task(name: str) -> None:
    """Remove a registered string task (a test's toy task, say); the built-in it shadowed is registered again."""
    TASKS.unregister(name)


def string_task(name: str) -> StringTask:
    """The registered task ``name``.

    :raises ValueError: no task has that name; the message names the known ones.
    """
    return TASKS.lookup(name)


def task_settings(name: str, options: Options) -> dict[str, Any]:
    """Every setting of task ``name`` that changes its numbers: :meth:`Options.settings` and the task's own."""
    return {**options.settings(), **string_task(name).settings(options)}


def item_seed(seed: int, index: int) -> int:
    """The seed of item ``index``'s generation: ``pair_seed(seed, "generate", index, 0)``."""
    return pair_seed(seed, "generate", str(index), 0)


@register_task
class Conditional(StringTask):
    """``log p(text | prompt, context)`` over strings, a certified interval, beside the canonical tokens' figure."""

    name = "conditional"
    doc = "log p(text | prompt) over strings with its certified interval"
    needs_text = True

    def answer(self, target: StringState | Ensemble, item: Item, options: Options,
               on_bytes: Callable[[int], None] | None) -> dict[str, Any]:
        text = item.text or ""
        if isinstance(target, Ensemble):
            return ensemble_conditional(target, text, on_bytes).to_dict()
        from ppl_tok.strings.conditional import conditional_of

        result = conditional_of(target, text, on_bytes)
        context = options.context + item.prompt
        lm = target.lm
        canonical = lm.canonical_log_prob(text, context) if context else lm.canonical_log_prob(text)
        return {**result.to_dict(), "prompt": item.prompt, "canonical_tokens": canonical}

    def bytes_after(self, item: Item, options: Options) -> int:
        return len((item.text or "").encode("utf-8"))


@register_task
class Next(StringTask):
    """The next byte's (or character's) distribution after the prompt, each entry a certified interval."""

    name = "next"
    doc = "the next-byte (or next-character) distribution after the prompt"

    def answer(self, target: StringState | Ensemble, item: Item, options: Options,
               on_bytes: Callable[[int], None] | None) -> dict[str, Any]:
        from ppl_tok.strings.chars import next_char_log_probs

        if isinstance(target, Ensemble):
            return {"prompt": item.prompt, "unit": "byte", **target.next_bytes().to_dict(), "forwards": target.forwards}
        prefix = target.prefix_log_prob()
        if options.chars:
            body = {"unit": "char", **next_char_log_probs(target, options.min_log_prob).to_dict()}
        else:
            body = {"unit": "byte", **target.next_byte_log_probs().to_dict(), "forwards": target.forwards}
        return {"prompt": item.prompt, **body, "prefix": {"lower": prefix.lower, "upper": prefix.upper},
                "prefill": target.prefill, "head_bytes": target.base}

    def settings(self, options: Options) -> dict[str, Any]:
        return {"chars": options.chars, "min_log_prob": options.min_log_prob}


@register_task
class Generate(StringTask):
    """A continuation of the prompt, drawn byte by byte or token by token (:func:`item_seed` per item)."""

    name = "generate"
    doc = "a continuation of the prompt, with its log-probability"

    def answer(self, target: StringState | Ensemble, item: Item, options: Options,
               on_bytes: Callable[[int], None] | None) -> dict[str, Any]:
        from ppl_tok.strings.generate import generate

        seed = item_seed(options.seed, item.index)
        g = generate(target, "", options.max_bytes, temperature=options.temperature, top_p=options.top_p,
                     greedy=options.greedy, seed=seed, stop=options.stop, progress=False, mode=options.mode)
        if on_bytes is not None:
            on_bytes(options.max_bytes)
        return {**g.to_dict(), "prompt": item.prompt, "seed": seed}

    def settings(self, options: Options) -> dict[str, Any]:
        return {"max_bytes": options.max_bytes, "temperature": options.temperature, "top_p": options.top_p,
                "greedy": options.greedy, "seed": options.seed, "stop": list(options.stop), "mode": options.mode}

    def bytes_after(self, item: Item, options: Options) -> int:
        return options.max_bytes


@register_task
class Surprisal(StringTask):
    """Each unit's surprisal over strings (word-end corrected), its bracket and canonical figure; the item's
    units as :attr:`Options.units` (or its :attr:`Item.regions`) say, the last one followed as
    :attr:`Options.final` says; with :attr:`Options.entropy`, the next token's entropy after each unit."""

    name = "surprisal"
    doc = "the surprisal of each unit of the prompt over strings, beside its canonical figure"
    walks_items = True
    ensembles = False

    def answer_items(self, lms: tuple[Any, ...], items: list[Item], options: Options) -> list[dict[str, Any] | ValueError]:
        from ppl_tok.strings.surprisal import WordRules, surprisal_batch

        (lm,) = lms
        rules = WordRules(split_punctuation=not options.keep_punctuation)
        units = [options.units if it.regions is None else [tuple(r) for r in it.regions] for it in items]
        texts = [it.prompt for it in items]
        from ppl_tok.strings.tree import TokenTree

        search = TokenTree(options.tree_back_off) if options.search == "tree" else options.search
        found = surprisal_batch(lm, texts, units=units, contexts=[options.context] * len(items),
                                config=options.config, rules=rules, wide=options.wide, final=options.final,
                                search=search)
        out: list[dict[str, Any] | ValueError] = []
        for it, u, rows in zip(items, units, found):
            if isinstance(rows, Exception):
                out.append(rows if isinstance(rows, ValueError) else ValueError(f"{type(rows).__name__}: {rows}"))
                continue
            dicts = [r.to_dict() for r in rows]
            for d in dicts:  # no upper bound: "Infinity", as --json writes it
                d["upper"] = "Infinity" if d["upper"] == float("inf") else d["upper"]
            if options.entropy:
                from ppl_tok.strings.entropy import next_token_entropies

                (ents,) = next_token_entropies(lm, [it.prompt], units=[u], contexts=[options.context], rules=rules)
                dicts = [{**d, "next_token_entropy": h} for d, h in zip(dicts, ents)]
            out.append({"prompt": it.prompt, "units": dicts})
        return out

    def settings(self, options: Options) -> dict[str, Any]:
        tree = {"search": "tree", "tree_back_off": options.tree_back_off} if options.search == "tree" else {}
        return {"units": options.units, "keep_punctuation": options.keep_punctuation, "wide_bits": options.wide,
                "final": options.final, "entropy": options.entropy, **tree}  # (a walk's settings as before the tree)


__all__ = ["TASKS", "Item", "Options", "StringTask", "Surprisal", "item_seed", "register_task", "string_task", "task_settings",
           "unregister_task"]
