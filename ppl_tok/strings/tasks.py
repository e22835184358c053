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

from ppl_tok.common.lazy import lazy_names
from ppl_tok.common.params import NoParams, Params
from ppl_tok.common.params import settings as settings_of
from ppl_tok.common.registry import Registry, class_registrar
from ppl_tok.common.seeds import pair_seed
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.ensemble import Ensemble
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
    #: generate: the item's own seed (the one ``--prompt``'s: the run's seed itself); ``None``: :func:`item_seed`
    #: of the run's seed and the item's index
    seed: int | None = None


@dataclass(frozen=True)
class Shown:
    """Who answered one prompt, for a task's printer (:meth:`StringTask.shown`): ``head`` names the LM (or the
    ensemble: ``"mixture of a + b"``), ``ensemble`` says which, ``top`` is how many rows a table prints."""

    head: str
    ensemble: bool = False
    top: int = 10


@dataclass
class Options:
    """What every task's answer depends on: the context and the beam over strings, and the task's own parameters.

    :param params: an instance of the task's :attr:`StringTask.params` (``None``: its defaults); the runner checks
        that it is the task's own (:meth:`StringTask.own`).
    """

    context: str = ""
    config: StringSearchConfig = field(default_factory=StringSearchConfig)
    params: Params | None = None

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
    #: the task's own parameters (:mod:`ppl_tok.common.params`): its flags, its ``--model_args``, its stored
    #: settings and their resume check derive from this one declaration
    params: ClassVar[type[Params]] = NoParams
    needs_text: ClassVar[bool] = False
    walks_items: ClassVar[bool] = False
    ensembles: ClassVar[bool] = True
    #: settings a run folder of this task written before they were stored holds implicitly (compared on resume)
    implicit: ClassVar[dict[str, Any]] = {}

    def answer(self, target: StringState | Ensemble, item: Item, options: Options,
               on_bytes: Callable[[int], None] | None) -> dict[str, Any]:
        """The item's record (JSON-able; ``-inf`` allowed) from the state after its prompt (one LM, or an ensemble);
        ``on_bytes`` reports the bytes walked past the prompt. A ``ValueError`` is the item's own error."""
        raise NotImplementedError

    def walks(self, options: Options) -> bool:
        """Whether a run under ``options`` walks its items itself (:meth:`answer_items`): :attr:`walks_items`, or a
        parameter of the task's that asks for it (``conditional``'s ``search="tree"``)."""
        return self.walks_items

    def answer_items(self, lms: tuple[Any, ...], items: list[Item], options: Options) -> list[dict[str, Any] | ValueError]:
        """:attr:`walks_items` tasks: the records of a batch's ``items`` (one per item, in order; a ``ValueError``
        is that item's own error), walked together under ``lms`` (one LM unless :attr:`ensembles`)."""
        raise NotImplementedError

    def own(self, options: Options) -> Params:
        """The task's parameters in ``options`` (its defaults where ``options.params`` is ``None``).

        :raises ValueError: ``options.params`` is another task's.
        """
        if options.params is None:
            return self.params()
        if not isinstance(options.params, self.params):
            raise ValueError(f"the {self.name} task takes {self.params.__qualname__}, got "
                             f"{type(options.params).__qualname__}: give the task's own parameters")
        return options.params

    def settings(self, options: Options) -> dict[str, Any]:
        """The settings of this task beyond :meth:`Options.settings` that change its numbers: its parameters
        (:func:`ppl_tok.common.params.settings`)."""
        return settings_of(self.own(options))

    def bytes_after(self, item: Item, options: Options) -> int:
        """The bytes the task walks after the prompt (its progress)."""
        return 0

    def check(self, options: Options, ensemble: bool) -> None:
        """Refuse, before any LM loads, settings the task cannot answer under (``ensemble``: several LMs): a
        ``ValueError`` naming the fix. The default refuses nothing."""

    def shown(self, record: dict[str, Any], options: Options, shown: Shown) -> tuple[dict[str, Any], list[str]]:
        """One prompt's record as a command prints it: the fields ``--json`` adds to the record, and the text
        lines. The default: nothing added, the record as one JSON line."""
        from ppl_tok.common.jsonout import to_json

        return {}, [to_json(record)]

    def __repr__(self) -> str:
        return f"<string task {self.name!r}>"


#: Every string task by name, in registration order.
TASKS: Registry[StringTask] = Registry("task", builtins=("ppl_tok.strings.builtin_tasks",))


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


def task_settings(task: str | StringTask, options: Options) -> dict[str, Any]:
    """Every setting of ``task`` (or the task of that name) that changes its numbers: :meth:`Options.settings` and
    the task's own."""
    task = task if isinstance(task, StringTask) else string_task(task)
    return {**options.settings(), **task.settings(options)}


def item_seed(seed: int, index: int) -> int:
    """The seed of item ``index``'s generation: ``pair_seed(seed, "generate", index, 0)``."""
    return pair_seed(seed, "generate", str(index), 0)


#: the built-in tasks and their parameters (:mod:`ppl_tok.strings.builtin_tasks`), named here on first use
__getattr__, __dir__ = lazy_names(__name__, dict.fromkeys(
    ("Conditional", "Generate", "GenerateParams", "Next", "NextParams", "Surprisal", "SurprisalParams"),
    "ppl_tok.strings.builtin_tasks"))


__all__ = ["TASKS", "GenerateParams", "Item", "NextParams", "NoParams", "Options", "Shown", "StringTask",
           "SurprisalParams", "Surprisal", "item_seed", "register_task", "string_task", "task_settings",
           "unregister_task"]
