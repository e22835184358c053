"""One registry shape (issue 57 item 4, issue 56 item 6): a class that only shares a built-in's name is refused
without ``replace=True``, accepted with it, and unregistering it restores the built-in; the unknown-name error
names the known ones; lazy ``module:object`` entries import on first lookup."""

import pytest

from ppl_tok.common.registry import Registry
from ppl_tok.scorings.registry import DOCUMENT, PAIR, QUESTION, Scoring, register, scoring, unregister
from ppl_tok.strings.tasks import StringTask, register_task, string_task, unregister_task


def test_a_scoring_that_only_shares_a_built_ins_name_needs_replace_and_unregister_restores_it():
    builtin = scoring("canonical", DOCUMENT)

    class Canonical(Scoring):
        name, estimator, levels, classifiers = "canonical", "a shadow", (DOCUMENT, PAIR, QUESTION), ("c",)

        def score_documents(self, lm, docs, config, *, on_bytes=None):
            return []

        def score_pairs(self, lm, pairs, config):
            return []

    with pytest.raises(ValueError, match="'canonical' is already registered .*replace=True"):
        register(Canonical)
    assert scoring("canonical", DOCUMENT) is builtin
    register(Canonical, replace=True)
    try:
        assert type(scoring("canonical", DOCUMENT)) is Canonical
    finally:
        unregister("canonical")
    assert scoring("canonical", DOCUMENT) is builtin


def test_a_task_that_only_shares_a_built_ins_name_needs_replace_and_unregister_restores_it():
    builtin = string_task("conditional")

    class Conditional(StringTask):
        name = "conditional"

        def answer(self, target, item, options, on_bytes=None):
            return {}

    with pytest.raises(ValueError, match="'conditional' is already registered"):
        register_task(Conditional)
    register_task(replace=True)(Conditional)
    try:
        assert type(string_task("conditional")) is Conditional
    finally:
        unregister_task("conditional")
    assert string_task("conditional") is builtin


def test_the_same_class_registered_again_is_one_registration():
    reg: Registry[object] = Registry("thing")

    class Thing:
        pass

    reg.register("a", Thing)
    reg.register("a", Thing)  # a module imported twice
    assert reg.names() == ("a",)


def test_an_unknown_name_is_an_error_naming_the_known_ones_and_lazy_entries_import_on_lookup():
    reg: Registry[object] = Registry("thing", hint="add one with reg.register")
    reg.register("sqrt", "math:sqrt")
    with pytest.raises(ValueError, match=r"unknown thing 'nope': expected one of sqrt \(add one with reg.register\)"):
        reg.lookup("nope")
    assert reg.lookup("sqrt")(9.0) == 3.0
    reg.register("bad", "no_such_module_xyz:f")
    with pytest.raises(ValueError, match="thing 'bad': cannot import its entry 'no_such_module_xyz:f'"):
        reg.lookup("bad")
    reg.unregister("bad")
    reg.unregister("never")  # unknown: a no-op
    assert list(reg) == ["sqrt"]


def test_built_ins_are_imported_on_first_use():
    import sys

    reg: Registry[object] = Registry("thing", builtins=("ppl_tok.common.bootstrap",))
    sys.modules.pop("ppl_tok.common.bootstrap", None)
    assert "ppl_tok.common.bootstrap" not in sys.modules
    assert reg.names() == () and "ppl_tok.common.bootstrap" in sys.modules


def test_a_backend_over_a_built_in_needs_replace_and_unregister_restores_it():
    from ppl_tok.lm.backends import BUILT_IN, get_backend, register_backend, unregister_backend

    with pytest.raises(ValueError, match="'transformers' is already registered"):
        register_backend("transformers", lambda spec, **kw: None)
    register_backend("transformers", "math:sqrt", replace=True)
    try:
        import math

        assert get_backend("transformers") is math.sqrt
    finally:
        unregister_backend("transformers")
    assert BUILT_IN["transformers"].endswith(":load_transformers")
    assert get_backend("transformers").__name__ == "load_transformers"


def test_the_built_ins_keep_their_order_whichever_module_is_imported_first():
    """A built-in scoring's module imported before the registry's first use (``mixture``, which imports
    ``importance``) still lists the scorings in report order (``BUILT_IN``'s)."""
    import subprocess
    import sys

    code = ("import ppl_tok.scorings.mixture\nfrom ppl_tok.scorings.registry import SCORINGS\n"
            "print(','.join(SCORINGS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1].split(",") == ["canonical", "importance", "beam", "prefix", "with-end", "mixture",
                                                 "canonical+rest", "exact", "stratified", "conditional",
                                                 "canonical-local", "canonical-global", "most-likely", "tree"]
