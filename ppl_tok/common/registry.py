"""One registry shape for every extension point: scorings, string tasks, LM backends and proposals.

A :class:`Registry` maps a name to a registered object. Each one offers the same operations:

* :meth:`Registry.register` adds a name; a name already registered is refused unless ``replace=True``, and that
  holds for a *different* object that only shares the name (a user's ``class Canonical(Scoring)`` is not the
  built-in ``canonical``); registering the same class again (a module imported twice) is a no-op;
* :meth:`Registry.unregister` removes a name, and where ``replace=True`` shadowed an earlier entry (a built-in,
  say), restores that one;
* :meth:`Registry.lookup` returns the object, or raises a ``ValueError`` naming the unknown name and every known
  one;
* an entry may be a lazy ``"module:object"`` string, imported on first lookup (a backend's dependencies are imported
  only when a spec names it);
* ``builtins``: the modules that register the built-in entries, imported (in order) on the first use of the
  registry, so that naming the registry imports none of them (``ppl-tok --help`` stays light).

A registry is a read-only :class:`~collections.abc.Mapping` of its names to their (resolved) objects, in
registration order.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def is_lazy_name(value: object) -> bool:
    """Whether ``value`` is a ``"module:object"`` string (both parts non-empty)."""
    return isinstance(value, str) and value.count(":") == 1 and all(value.split(":"))


def _same(a: object, b: object) -> bool:
    """Whether two entries are one registration: the same object or lazy name, equal records (a dataclass), or a
    class (or an instance of a class) of the same module and qualified name (a module imported twice registers its
    class again)."""
    if a is b or (isinstance(a, str) and a == b):
        return True
    if type(a) is type(b) and not isinstance(a, type) and type(a).__eq__ is not object.__eq__:
        return bool(a == b)  # a record (a dataclass): the same fields
    ca, cb = (x if isinstance(x, type) else type(x) for x in (a, b))
    if ca in (str, type(None)) or cb in (str, type(None)):
        return False
    if not isinstance(a, type) and callable(a) and not isinstance(b, type) and callable(b):  # two functions
        ca, cb = a, b  # type: ignore[assignment]
    return (getattr(ca, "__module__", None), getattr(ca, "__qualname__", None)) == \
           (getattr(cb, "__module__", None), getattr(cb, "__qualname__", None))


class Registry(Mapping[str, T], Generic[T]):
    """Registered objects by name (see the module's docstring).

    :param kind: what an entry is, for messages (``"scoring"``, ``"string task"``, ``"LM backend"``, ``"proposal"``).
    :param builtins: the modules whose import registers the built-in entries, imported on first use.
    :param hint: how to add one, appended to the unknown-name error (``"add one with register_backend"``).
    :param entry: what a lazy entry names, for messages (``"loader"``).
    """

    def __init__(self, kind: str, *, builtins: Sequence[str] = (), hint: str = "", entry: str = "entry") -> None:
        self.kind, self.hint, self.entry = kind, hint, entry
        self._builtins = tuple(builtins)
        self._loaded = not self._builtins
        self._entries: dict[str, T | str] = {}
        self._shadowed: dict[str, list[T | str]] = {}
        #: each name's place: the built-ins in the order of their modules (whichever module is imported first),
        #: then the others in registration order
        self._rank: dict[str, tuple[int, int]] = {}
        self._count = itertools.count()

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True  # first: a built-in module registers itself through this registry
            for module in self._builtins:
                importlib.import_module(module)

    def _resolve(self, name: str) -> T:
        entry = self._entries[name]
        if isinstance(entry, str):
            module, attribute = entry.split(":")
            try:
                found = getattr(importlib.import_module(module), attribute)
            except (ImportError, AttributeError) as err:
                raise ValueError(f"{self.kind} {name!r}: cannot import its {self.entry} {entry!r} ({err})") from err
            self._entries[name] = entry = found
        return entry  # type: ignore[return-value]

    # ------------------------------------------------------------------ the operations
    def register(self, name: str, value: T | str, *, replace: bool = False) -> None:
        """Register ``value`` (an object, or a lazy ``"module:object"``) under ``name``.

        :raises ValueError: ``name`` is empty, or already registered to another object without ``replace=True``.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        self._load()
        if name in self._entries:
            current = self._entries[name]
            if _same(current, value):
                self._entries[name] = value
                return
            if not replace:
                raise ValueError(f"{self.kind} {name!r} is already registered ({_describe(current)}); give yours "
                                 "another name, or pass replace=True to shadow it")
            self._shadowed.setdefault(name, []).append(current)
        else:
            module = value.split(":")[0] if isinstance(value, str) else getattr(
                value if isinstance(value, type) or callable(value) else type(value), "__module__", None)
            rank = self._builtins.index(module) if module in self._builtins else len(self._builtins)
            self._rank[name] = (rank, next(self._count))
        self._entries[name] = value

    def unregister(self, name: str) -> None:
        """Remove ``name``; the entry it shadowed (``replace=True``) is registered again. Unknown: a no-op."""
        self._load()
        if name not in self._entries:
            return
        earlier = self._shadowed.get(name)
        if earlier:
            self._entries[name] = earlier.pop()
            if not earlier:
                del self._shadowed[name]
        else:
            del self._entries[name]
            del self._rank[name]

    def lookup(self, name: str) -> T:
        """The object registered as ``name`` (a lazy entry imported now).

        :raises ValueError: no such name; the message names the known ones (and how to add one).
        """
        self._load()
        if not isinstance(name, str) or name not in self._entries:
            raise ValueError(self.unknown(name))
        return self._resolve(name)

    def unknown(self, name: object, known: Sequence[str] | None = None) -> str:
        """The error line for an unknown ``name``: it, and the ``known`` names (default: all)."""
        known = self.names() if known is None else known
        return (f"unknown {self.kind} {name!r}: expected one of {', '.join(known)}"
                + (f" ({self.hint})" if self.hint else ""))

    def names(self) -> tuple[str, ...]:
        """The registered names: the built-ins in the order of :attr:`builtins`, then the others in registration
        order."""
        self._load()
        return tuple(sorted(self._entries, key=self._rank.__getitem__))

    # ------------------------------------------------------------------ Mapping
    def __getitem__(self, name: str) -> T:
        self._load()
        if name not in self._entries:
            raise KeyError(name)
        return self._resolve(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load()
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __repr__(self) -> str:
        return f"<Registry of {self.kind}s: {', '.join(self._entries) if self._loaded else '(not loaded yet)'}>"


def _describe(entry: object) -> str:
    if isinstance(entry, str):
        return entry
    c = entry if isinstance(entry, type) or callable(entry) else type(entry)
    return f"{getattr(c, '__module__', '?')}.{getattr(c, '__qualname__', repr(c))}"


def class_registrar(registry: Registry[Any], check: Callable[[type], Any]) -> Callable[..., Any]:
    """A class decorator that registers an instance of the class under its ``name`` in ``registry``:
    ``@register`` or ``@register(replace=True)`` (or ``register(cls, replace=True)``). ``check(cls)`` validates
    the class and returns its instance (raising a ``ValueError`` naming what to fix)."""

    def register(cls: type | None = None, *, replace: bool = False) -> Any:
        def add(c: type) -> type:
            obj = check(c)
            registry.register(obj.name, obj, replace=replace)
            return c

        return add if cls is None else add(cls)

    return register
