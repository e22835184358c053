"""LM backends: how an :class:`~ppl_tok.lm.spec.LMSpec` becomes a :class:`~ppl_tok.lm.base.LanguageModel`.

:func:`ppl_tok.lm.cards.load_lm` looks up ``spec.backend`` here and calls its loader::

    loader(spec, config=config, head_fp32=head_fp32) -> LanguageModel

``config`` is the engine's :class:`~ppl_tok.lm.config.EngineConfig` (``None``: the backend's default);
``head_fp32`` asks a half-precision model for an fp32 LM head (a backend without one ignores it: take
``**options``). The loader reads the model, device, dtype and BOS id from the spec.

A new backend (vLLM, say) is one module holding its loader (and its
``LanguageModel`` subclass) plus one registration: a line in :data:`BUILT_IN`
(``"vllm": "ppl_tok.lm.vllm:load"``) for a backend shipped with ppl-tok, or
``register_backend("vllm", load)`` from outside the package. A loader named as
``"module:function"`` is imported on first use, so a backend's dependencies are
imported only when a spec names it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ppl_tok.common.registry import Registry, is_lazy_name
from ppl_tok.lm.spec import DEFAULT_BACKEND

#: A backend's loader: ``loader(spec, *, config=None, **options) -> LanguageModel``.
Loader = Callable[..., Any]

#: The backends shipped with ppl-tok: name -> ``"module:function"`` of the loader.
BUILT_IN: dict[str, str] = {DEFAULT_BACKEND: "ppl_tok.lm.hf_loader:load_transformers"}

#: The registered backends (:class:`~ppl_tok.common.registry.Registry`), the built-in ones as lazy ``"module:function"``.
BACKENDS: Registry[Loader] = Registry("LM backend", entry="loader", hint="add one with "
                                      "ppl_tok.lm.backends.register_backend, or name its loader as 'module:function'")
for _name, _loader in BUILT_IN.items():
    BACKENDS.register(_name, _loader)


def register_backend(name: str, loader: Loader | str, *, replace: bool = False) -> None:
    """Make ``LMSpec(backend=name)`` load with ``loader`` (a callable or ``"module:function"``).

    Registering a name twice is an error unless ``replace``; :func:`unregister_backend` then restores the one shadowed.
    """
    if not (callable(loader) or is_lazy_name(loader)):
        raise TypeError(f"backend {name!r}: the loader must be a callable or 'module:function', got {loader!r}")
    BACKENDS.register(name, loader, replace=replace)


def unregister_backend(name: str) -> None:
    """Forget the backend ``name`` (a no-op if it is not registered); a built-in it shadowed is registered again."""
    BACKENDS.unregister(name)


def backends() -> tuple[str, ...]:
    """The names of the registered backends, sorted."""
    return tuple(sorted(BACKENDS))


def get_backend(name: str) -> Loader:
    """The loader of backend ``name``: a registered name, or a ``"module:function"`` that names a loader
    (``--backend mypkg.vllm:load`` from the command line, which cannot call :func:`register_backend`).
    An unknown name, or a module or function that cannot be imported, is a ``ValueError`` naming it."""
    if name not in BACKENDS:
        if not is_lazy_name(name):
            raise ValueError(f"unknown LM backend {name!r}: the registered backends are "
                             f"{', '.join(map(repr, backends()))} ({BACKENDS.hint})")
        BACKENDS.register(name, name)
    try:
        loader = BACKENDS.lookup(name)
    except ValueError:
        _forget_unloadable(name)
        raise
    if not callable(loader):
        _forget_unloadable(name)
        raise ValueError(f"LM backend {name!r}: {name if is_lazy_name(name) else 'its loader'!r} is not a callable "
                         "loader")
    return loader


class BackendError(ValueError):
    """A backend's loader cannot be called as one, failed, or returned something that is not a ``LanguageModel``."""


def load_with_backend(spec: Any, **options: Any) -> Any:
    """``loader(spec, **options)`` for the loader of ``spec.backend`` (:func:`get_backend`), checked.

    A loader that cannot take ``(spec, config=..., head_fp32=...)``, one that raises, and one that returns
    anything but a :class:`~ppl_tok.lm.base.LanguageModel` (a string, ``None``) is a :class:`BackendError`:
    one line naming the backend and what was wrong. The built-in backends' own errors (a missing model, a
    bad device) pass unchanged; they name their input already."""
    from ppl_tok.lm.base import LanguageModel

    name = spec.backend
    loader = get_backend(name)
    built_in = name in BUILT_IN
    try:
        inspect.signature(loader).bind(spec, **options)
    except TypeError as err:
        raise BackendError(f"LM backend {name!r}: its loader cannot be called as loader(spec, "
                           f"{', '.join(f'{k}=...' for k in options)}) ({err}); define it as "
                           "`def load(spec, *, config=None, **options)`") from err
    except ValueError:  # no signature to read (a C function): calling it is the check
        pass
    try:
        lm = loader(spec, **options)
    except MemoryError:
        raise
    except Exception as err:
        if built_in:
            raise
        raise BackendError(f"LM backend {name!r} failed loading {spec.model!r}: {type(err).__name__}: {err}") from err
    if not isinstance(lm, LanguageModel):
        raise BackendError(f"LM backend {name!r} returned {type(lm).__name__} {str(lm)[:60]!r} for {spec.model!r}, "
                           "not a LanguageModel: its loader must return an instance of a "
                           "ppl_tok.lm.base.LanguageModel subclass")
    return lm


def _forget_unloadable(name: str) -> None:
    """A named loader that failed to import is not left registered (the built-in ones stay, to fail again loudly)."""
    if name not in BUILT_IN:
        BACKENDS.unregister(name)
