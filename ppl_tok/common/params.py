"""The parameters an operation owns (a scoring, a string task, a proposal), declared once, read everywhere.

An operation declares a frozen dataclass of its own parameters, a subclass of :class:`Params`; each field has a
default, one line of help and, for the command line, a flag and a type from :mod:`ppl_tok.common.arguments`::

    @dataclass(frozen=True)
    class BeamParams(Params):
        beam: int = param(8, "hypotheses kept per byte offset", flag="--beam", type=integer(1))
        prune: float = param(1e-6, "drop hypotheses below this share of the best", flag="--prune", type=positive)

Every consumer derives from that one declaration, so each default lives in one place:

* the command line (:func:`add_flags`, :func:`add_flags_later`, :func:`from_args`, :func:`refuse_foreign`): one
  flag per field, shared by the operations that declare the same field; a flag that no chosen operation declares is
  one usage line naming the operation and the flags it takes;
* values given as strings, as lm-eval's ``--model_args`` gives them (:func:`from_values`, :func:`split_values`;
  :class:`ParamValueError` carries the field and the bare reason, for a consumer's own wording);
* the settings stored in a run folder and their comparison on resume (:func:`settings`, :func:`from_settings`,
  :func:`differences`, :func:`check_resume`);
* the Markdown table of the API reference (:func:`markdown_table`).

A field may also name its memory limit (``limit=``, a name in ``ppl_tok.limits``, which the consumer checks at its
edge) and old flag names (``aliases=``, each a deprecation warning); :func:`default_of` reads one default for a
consumer that keeps a flag of its own (``shared=`` of :func:`add_flags` leaves such fields out).

A value is valid when the field's type, which parses a command-line string, gives the value back from its own
text: ``type(str(v)) == v``. The same parser checks a flag, a ``--model_args`` string, a stored setting and a
Python argument, with the same message (:func:`check`). Fields without a flag (Python only) still validate,
travel in ``--model_args`` and in stored settings.

What every operation of a kind shares (the LM, the window, the batch size) stays in the kind's config object
(``ScoringConfig``, ``Options``); only what one operation reads belongs in its :class:`Params`.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

#: The metadata keys of a field (:func:`param`).
KEYS = ("help", "flag", "type", "choices", "aliases", "metavar", "limit")
#: A parsed flag's attribute on the namespace: ``PREFIX + field`` (apart from every other flag's dest).
PREFIX = "param:"
_TRUE, _FALSE, _NONE = ("true", "yes", "1", "on"), ("false", "no", "0", "off"), ("none", "null")


def param(default: Any, help: str, *, flag: str | None = None, type: Callable[[str], Any] | None = None,
          choices: Iterable[Any] | None = None, aliases: Iterable[str] = (), metavar: str | None = None,
          limit: str | None = None) -> Any:
    """A field of a :class:`Params` dataclass: its ``default``, one line of ``help``, its command-line ``flag`` (and
    old names, ``aliases``, each a deprecation warning when used), the ``type`` that parses its text (an argparse
    type: ``ppl_tok.common.arguments.integer(1)``, ``positive``...) and its ``choices``. ``limit``: the name of the
    memory limit (``ppl_tok.limits``) a value given at the command line or in ``--model_args`` is checked against.

    A ``bool`` field needs no type (its flag takes no value and sets the other value); a field whose default is
    ``None`` also takes ``None`` (``"none"`` as text)."""
    meta = {"help": help, "flag": flag, "type": type, "choices": tuple(choices) if choices is not None else None,
            "aliases": tuple(aliases), "metavar": metavar, "limit": limit}
    return dataclasses.field(default=default, metadata=meta)


class Spec(NamedTuple):
    """One parameter as the adapter reads it off its field (:func:`specs`)."""

    name: str
    default: Any
    help: str
    flag: str | None
    type: Callable[[str], Any] | None
    choices: tuple[Any, ...] | None
    aliases: tuple[str, ...]
    metavar: str | None
    limit: str | None = None

    @property
    def boolean(self) -> bool:
        """A switch: its flag takes no value."""
        return isinstance(self.default, bool)

    @property
    def label(self) -> str:
        """The field's name and, if it has one, its flag: ``num_samples (--samples)``."""
        return f"{self.name} ({self.flag})" if self.flag else self.name

    @property
    def dest(self) -> str:
        """Its attribute on a parsed namespace."""
        return PREFIX + self.name


def specs(cls: type) -> tuple[Spec, ...]:
    """The parameters of a :class:`Params` dataclass (a class or an instance), in field order.

    :raises TypeError: ``cls`` is no dataclass, or a field has no default or no help.
    """
    cls = cls if isinstance(cls, type) else type(cls)
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__qualname__} is not a dataclass of parameters (ppl_tok.common.params)")
    out = []
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING:
            raise TypeError(f"{cls.__qualname__}.{f.name}: a parameter needs a default (ppl_tok.common.params.param)")
        meta = f.metadata
        if not meta.get("help"):
            raise TypeError(f"{cls.__qualname__}.{f.name}: a parameter needs one line of help "
                            "(ppl_tok.common.params.param)")
        spec = Spec(f.name, f.default, meta["help"], meta.get("flag"), meta.get("type"), meta.get("choices"),
                    tuple(meta.get("aliases", ())), meta.get("metavar"), meta.get("limit"))
        if spec.flag is not None and not spec.flag.startswith("--"):
            raise TypeError(f"{cls.__qualname__}.{f.name}: flag {spec.flag!r} must start with --")
        if spec.flag is not None and _opaque(spec):
            raise TypeError(f"{cls.__qualname__}.{f.name}: give the type that parses its text "
                            "(ppl_tok.common.arguments)")
        out.append(spec)
    return tuple(out)


def _opaque(spec: Spec) -> bool:
    """A field with no text form (no type, no choices, not a switch or a string): a Python value (a record, a
    config object), given in Python only and stored as it is."""
    return not spec.boolean and spec.type is None and spec.choices is None and not isinstance(spec.default, str)


def default_of(cls: type, name: str) -> Any:
    """The default of the field ``name`` of ``cls`` (what a consumer that sets its own flag reads, so that the
    default lives in one place).

    :raises KeyError: ``cls`` has no such field.
    """
    return _spec(cls, name).default


def _spec(cls: type, name: str) -> Spec:
    for s in specs(cls):
        if s.name == name:
            return s
    raise KeyError(name)


# ------------------------------------------------------------------ values
def _parse(spec: Spec, text: str) -> Any:
    """The value of ``text`` for ``spec`` (``ValueError`` with the type's message)."""
    if spec.default is None and text.strip().lower() in _NONE:
        return None
    if spec.boolean:
        low = text.strip().lower()
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise ValueError(f"expected true or false, got {text!r}")
    try:
        value = spec.type(text) if spec.type is not None else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
        raise ValueError(str(err)) from None
    if spec.choices is not None and value not in spec.choices:
        raise ValueError(f"expected one of {', '.join(map(str, spec.choices))}, got {text!r}")
    return value


class ParamValueError(ValueError):
    """A bad value for one field: the message names the field (and its flag); :attr:`spec`, :attr:`value` and
    :attr:`reason` (what the field expects, without the name) let a consumer name it its own way
    (lm-eval's ``num_samples=0: expected an integer >= 1, got 0``)."""

    def __init__(self, spec: Spec, value: Any, reason: str) -> None:
        super().__init__(f"{spec.label}: {reason}")
        self.spec, self.value, self.reason = spec, value, reason


def value_of(spec: Spec, value: Any, text: bool = True) -> Any:
    """``value`` checked for ``spec``: a string is parsed by the field's type (with ``text=False``, only a field of
    strings takes one); any other value must be what its own text parses to (an ``int`` field refuses ``1.5`` and
    ``True``, a ``float`` field takes ``1`` as ``1.0``).

    :raises ParamValueError: one line naming the field (and its flag), what it expects and the value.
    """
    try:
        if _opaque(spec):
            if isinstance(value, str):
                raise ValueError(f"a Python value, not text ({value!r}): give it in Python")
            return value
        if isinstance(value, str):
            if not text and not _textual(spec):
                expected = "True or False" if spec.boolean else getattr(spec.type, "__name__", "a value")
                raise ValueError(f"expected {expected}, got {value!r}")
            return _parse(spec, value)
        if value is None:
            if spec.default is None:
                return None
            raise ValueError("expected a value, got None")
        if spec.boolean:
            if isinstance(value, bool):
                return value
            raise ValueError(f"expected True or False, got {value!r}")
        if isinstance(value, bool) and not isinstance(spec.default, bool) and spec.type is not None:
            raise ValueError(f"expected {spec.type.__name__}, got {value!r}")
        parsed = _parse(spec, str(value))
        if parsed != value or isinstance(parsed, str) != isinstance(value, str):
            raise ValueError(f"expected {getattr(spec.type, '__name__', 'a value')}, got {value!r}")
        return parsed
    except ValueError as err:
        raise ParamValueError(spec, value, str(err)) from None


def _textual(spec: Spec) -> bool:
    """Whether the field's values are strings."""
    return isinstance(spec.default, str) or any(isinstance(c, str) for c in spec.choices or ())


def check(params: Any) -> None:
    """Every field of ``params`` valid (:func:`value_of`); a float field given an int is stored as the float.

    :raises ValueError: the first invalid field, named with its flag, its expectation and its value.
    """
    for spec in specs(params):
        value = getattr(params, spec.name)
        checked = value_of(spec, value, text=False)
        if checked is not value and type(checked) is not type(value):
            object.__setattr__(params, spec.name, checked)


@dataclasses.dataclass(frozen=True)
class Params:
    """The base of an operation's parameters: a frozen dataclass whose fields are :func:`param` s, each checked
    when made (:func:`check`). A subclass with checks across fields overrides ``__post_init__`` and calls
    ``super().__post_init__()`` first."""

    def __post_init__(self) -> None:
        check(self)


@dataclasses.dataclass(frozen=True)
class NoParams(Params):
    """The parameters of an operation (a scoring, a string task, a proposal) that has none of its own."""


def split_values(cls: type, values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``values`` (keyword arguments, ``--model_args``) split into those that name a field of ``cls`` and the rest."""
    names = {s.name for s in specs(cls)}
    return ({k: v for k, v in values.items() if k in names}, {k: v for k, v in values.items() if k not in names})


def from_values(cls: type, values: Mapping[str, Any], owner: str = "") -> Any:
    """An instance of ``cls`` from ``values``: strings (lm-eval's ``--model_args``, a settings file) parsed by each
    field's type, other values checked (:func:`value_of`); a field not given keeps its default.

    :raises ValueError: a key that is no field of ``cls`` (naming ``owner`` and the fields it takes), or a bad value.
    """
    mine, rest = split_values(cls, values)
    if rest:
        known = ", ".join(s.name for s in specs(cls)) or "none"
        raise ValueError(f"{owner or cls.__qualname__} takes no parameter {', '.join(sorted(rest))} "
                         f"(its parameters: {known})")
    return cls(**{k: value_of(_spec(cls, k), v) for k, v in mine.items()})


# ------------------------------------------------------------------ run folders
def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def settings(params: Any) -> dict[str, Any]:
    """What a run folder stores of ``params``: each field's value (JSON values), by field name."""
    return {s.name: _jsonable(getattr(params, s.name)) for s in specs(params)}


def from_settings(cls: type, stored: Mapping[str, Any], owner: str = "") -> Any:
    """The parameters a run folder stored (:func:`settings`); a field the folder lacks (added since) has its
    default. Keys that are no field of ``cls`` are the other settings of the run, left alone."""
    mine, _ = split_values(cls, stored)
    return from_values(cls, mine, owner)


def _shown(spec: Spec, value: Any) -> str:
    """The flag that gives ``value``: ``--beam 8``, ``--exhaustive``, ``without --exhaustive``."""
    if spec.boolean:
        return spec.flag if value != spec.default else f"without {spec.flag}"
    return f"{spec.flag} {value}"


def differences(cls: type, stored: Mapping[str, Any], current: Any) -> list[str]:
    """The fields of ``cls`` whose value in a run folder's ``stored`` settings differs from ``current``'s, one line
    each: ``num_samples (--samples): the folder has 64, this run has 8 (the folder's run: --samples 64)``. A field
    the folder lacks is compared as its default."""
    out = []
    now = settings(current)
    for spec in specs(cls):
        old = _jsonable(stored.get(spec.name, spec.default))
        if old != now[spec.name]:
            line = f"{spec.label}: the folder has {old!r}, this run has {now[spec.name]!r}"
            out.append(line + (f" (the folder's run: {_shown(spec, old)})" if spec.flag else ""))
    return out


def check_resume(cls: type, stored: Mapping[str, Any], current: Any, where: str) -> None:
    """A resume of the run folder ``where`` under other parameters refused.

    :raises ValueError: one line naming the folder and each field that differs (:func:`differences`).
    """
    diff = differences(cls, stored, current)
    if diff:
        raise ValueError(f"{where} was written by a run with other settings; use another folder or the same "
                         "settings. Differences: " + "; ".join(diff))


# ------------------------------------------------------------------ the command line
def _flag_help(owners: list[tuple[str, Spec]], what: str) -> str:
    spec = owners[0][1]
    defaults = {}
    for name, s in owners:
        defaults.setdefault(repr(s.default) if not isinstance(s.default, str) else s.default, []).append(name)
    where = (f"{what} " if what else "") + ", ".join(name for name, _ in owners)
    if len(defaults) == 1:
        default = next(iter(defaults))
        shown = "" if spec.boolean else f"; default {default}"
    else:
        shown = "; default " + ", ".join(f"{v} ({', '.join(ns)})" for v, ns in defaults.items())
    return f"{spec.help} ({where}{shown})".replace("%", "%%")


def add_flags(container: Any, operations: Mapping[str, type], what: str = "", shared: Iterable[str] = ()) -> None:
    """The flags of every operation's parameters added to ``container`` (a parser or an argument group): one flag per
    field, shared by the operations that declare a field of the same name and flag; its help names them and their
    defaults. Flags default to absent: a field not given keeps its operation's own default (:func:`from_args`).
    ``what`` names the choosing flag in the help (``--scoring``); ``shared``: fields the command takes with flags
    of its own (for every operation), left out here.

    :raises ValueError: two operations give one flag to different fields, or a flag is the parser's already.
    """
    by_flag: dict[str, list[tuple[str, Spec]]] = {}
    shared = set(shared)
    for name, cls in operations.items():
        for spec in specs(cls):
            if spec.flag is None or spec.name in shared:
                continue
            owners = by_flag.setdefault(spec.flag, [])
            if owners and (owners[0][1].name != spec.name or owners[0][1].boolean != spec.boolean):
                raise ValueError(f"flag {spec.flag} is field {owners[0][1].name} of {owners[0][0]} but field "
                                 f"{spec.name} of {name}: one flag, one field")
            owners.append((name, spec))
    taken = getattr(container, "_option_string_actions", {})
    for flag, owners in by_flag.items():
        spec = owners[0][1]
        names = (flag, *dict.fromkeys(a for _, s in owners for a in s.aliases))
        for n in names:
            if n in taken:
                raise ValueError(f"flag {n} of {owners[0][0]}'s {spec.name} is already a flag of this command")
        kwargs: dict[str, Any] = {"dest": spec.dest, "default": argparse.SUPPRESS, "help": _flag_help(owners, what)}
        if spec.boolean:
            kwargs.update(action="store_const", const=not spec.default)
            if len(names) > 1:
                raise ValueError(f"flag {flag}: a switch takes no old names")
        else:
            kwargs.update(type=_argparse_type(spec), metavar=spec.metavar or spec.name.upper())
            if len(names) > 1:
                from ppl_tok.common.arguments import DeprecatedAlias

                kwargs.update(action=DeprecatedAlias, old=names[1:])
        action = container.add_argument(*names, **kwargs)
        action.param_field = spec.name
        action.param_owners = tuple(name for name, _ in owners)


def _argparse_type(spec: Spec) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return _parse(spec, text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = getattr(spec.type, "__name__", "value")
    return parse


def add_flags_later(parser: argparse.ArgumentParser, operations: Callable[[], Mapping[str, type]],
                    what: str = "", shared: Iterable[str] = ()) -> None:
    """:func:`add_flags` when ``parser`` first parses or shows its help, not now: reading the operations may
    import their modules (torch), which ``ppl-tok --help`` must not."""
    done = []
    parse_known, format_help, format_usage = parser.parse_known_args, parser.format_help, parser.format_usage

    def add() -> None:
        if not done:
            done.append(True)
            group = parser.add_argument_group(f"parameters of each {what.lstrip('-') or 'operation'}")
            add_flags(group, operations(), what, shared)

    def parse_known_args(args: Any = None, namespace: Any = None) -> Any:
        add()
        return parse_known(args, namespace)

    def help_() -> str:
        add()
        return format_help()

    def usage() -> str:
        add()
        return format_usage()

    parser.parse_known_args, parser.format_help, parser.format_usage = parse_known_args, help_, usage


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The parameters given on the command line, by field name (:func:`add_flags`' flags that were used)."""
    return {k[len(PREFIX):]: v for k, v in vars(args).items() if k.startswith(PREFIX)}


def from_args(cls: type, args: argparse.Namespace) -> Any:
    """An instance of ``cls`` from the flags given (the others: its defaults). Flags of fields that ``cls`` does
    not declare are left out here; :func:`refuse_foreign` refuses them."""
    mine, _ = split_values(cls, given(args))
    return cls(**mine)


def refuse_foreign(args: argparse.Namespace, chosen: Mapping[str, type], operations: Mapping[str, type],
                   what: str) -> None:
    """A flag of :func:`add_flags` that no ``chosen`` operation declares is refused: ``what`` (``--scoring``) and
    the chosen names, the flags they take, and the operations the flag is for, in one line. A flag given the
    default of every operation that declares it changes nothing, and passes.

    :raises ValueError: the first such flag (by field order of ``operations``).
    """
    wanted = {s.name for cls in chosen.values() for s in specs(cls)}
    flags = {s.name: s.flag for cls in operations.values() for s in specs(cls)}
    for name in given(args):
        if name in wanted:
            continue
        flag = flags.get(name, name)
        users = [op for op, cls in operations.items() if any(s.name == name for s in specs(cls))]
        if all(_spec(operations[op], name).default == given(args)[name] for op in users):
            continue
        takes = sorted({s.flag for cls in chosen.values() for s in specs(cls) if s.flag})
        chosen_text = f"{what} {', '.join(chosen)}"
        raise ValueError(f"{flag} would be ignored: {chosen_text} does not read it "
                         f"({'it takes ' + ', '.join(takes) if takes else 'it takes no flags of its own'}; "
                         f"{flag} is for {what} {', '.join(users)}); leave {flag} out or choose one of those")


# ------------------------------------------------------------------ the reference
def markdown_table(cls: type) -> str:
    """The parameters of ``cls`` as a Markdown table: field, flag, default, help."""
    def cell(text: Any) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    rows = ["| field | flag | default | help |", "|---|---|---|---|"]
    rows += [f"| `{s.name}` | {f'`{s.flag}`' if s.flag else '-'} | `{s.default!r}` | {cell(s.help)} |"
             for s in specs(cls)]
    return "\n".join(rows)


__all__ = ["KEYS", "PREFIX", "NoParams", "ParamValueError", "Params", "Spec", "add_flags", "add_flags_later", "check",
           "check_resume", "default_of", "differences", "from_args", "from_settings", "from_values", "given",
           "markdown_table", "param", "refuse_foreign", "settings", "specs", "split_values", "value_of"]
