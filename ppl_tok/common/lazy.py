"""Lazy public names of a package (PEP 562): a package's facade names what it offers without importing it.

``__getattr__, __dir__ = lazy_names(__name__, {"load_lm": "ppl_tok.lm.cards", ...})`` in a package's
``__init__`` makes ``package.load_lm`` import ``ppl_tok.lm.cards`` on first use and keep the value in the
package's globals, so that importing the package itself imports neither torch, pyro, networkx nor transformers
(``ppl-tok --help`` and ``import ppl_tok`` stay light: ``python -m benchmarks startup``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``(__getattr__, __dir__)`` pair of ``package`` that resolves each of ``names`` (name -> the module that
    defines it) on first use; any other name is an ``AttributeError`` naming it."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
