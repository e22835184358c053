"""The backend registry: load_lm dispatches on LMSpec.backend; a new backend is one loader and one registration."""

import pytest
import torch

from ppl_tok import BigramLM, Vocabulary
from ppl_tok.common.registry import Registry
from ppl_tok.lm import backends
from ppl_tok.lm.backends import backends as registered, get_backend, register_backend, unregister_backend
from ppl_tok.lm.cards import load_lm
from ppl_tok.lm.spec import LMSpec

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab"])


def isolate(monkeypatch, entries=None):
    """The backend registry replaced, for one test, by a fresh one holding ``entries`` (default: the built-in ones)."""
    fresh = Registry("LM backend", entry="loader", hint=backends.BACKENDS.hint)
    for name, loader in (backends.BUILT_IN if entries is None else entries).items():
        fresh.register(name, loader)
    monkeypatch.setattr(backends, "BACKENDS", fresh)


@pytest.fixture
def toy_backend():
    seen = []

    def load(spec, *, config=None, **options):
        seen.append((spec, config, options))
        return BigramLM(VOCAB, torch.full((4, 4), 0.25), bos_id=spec.bos_id if spec.bos_id is not None else 0)

    register_backend("toy", load)
    yield seen
    unregister_backend("toy")


def test_a_registered_backend_loads_its_specs(toy_backend):
    spec = LMSpec(model="x", backend="toy", bos_id=1)
    assert "toy" in registered() and "transformers" in registered()
    lm = load_lm(spec)
    assert isinstance(lm, BigramLM) and lm.bos_id == 1 and lm.spec is spec
    assert toy_backend == [(spec, None, {"head_fp32": True})]


def test_unknown_backend_names_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown LM backend 'vllm': the registered backends are 'transformers'"):
        load_lm(LMSpec(model="x", backend="vllm"))
    with pytest.raises(ValueError, match="unknown LM backend 'nope'"):
        get_backend("nope")


def test_registration_is_checked_and_named_loaders_are_imported_on_first_use(toy_backend, monkeypatch):
    with pytest.raises(ValueError, match="'toy' is already registered"):
        register_backend("toy", lambda spec, **kw: None)
    with pytest.raises(TypeError, match="callable or 'module:function'"):
        register_backend("other", 3)
    with pytest.raises(ValueError, match="non-empty string"):
        register_backend("", lambda spec, **kw: None)
    isolate(monkeypatch)
    register_backend("toy", "ppl_tok.lm.hf_loader:load_transformers", replace=True)
    from ppl_tok.lm.hf_loader import load_transformers

    assert get_backend("toy") is load_transformers
    assert backends.BUILT_IN["transformers"] == "ppl_tok.lm.hf_loader:load_transformers"


def test_a_name_loads_as_a_transformers_spec(monkeypatch):
    seen = []
    isolate(monkeypatch, {"transformers": lambda spec, **kw: seen.append(spec) or
                          BigramLM(VOCAB, torch.full((4, 4), 0.25), bos_id=0)})
    lm = load_lm("some-card", device=torch.device("cpu"), dtype=torch.bfloat16, bos_id=2)
    assert seen == [LMSpec(model="some-card", device="cpu", dtype="bfloat16", bos_id=2)] and lm.spec == seen[0]
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        load_lm("some-card", dtype="int8")
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        load_lm("some-card", device="gpu0")


def toy_loader(spec, *, config=None, **options):
    """A loader named as 'module:function' (``--backend tests.lm.test_backends:toy_loader``)."""
    return BigramLM(VOCAB, torch.full((4, 4), 0.25), bos_id=0)


def test_a_loader_named_as_module_function_is_a_backend(monkeypatch):
    isolate(monkeypatch)
    lm = load_lm(LMSpec(model="x", backend="tests.lm.test_backends:toy_loader"))
    assert isinstance(lm, BigramLM) and lm.spec.backend == "tests.lm.test_backends:toy_loader"
    with pytest.raises(ValueError, match=r"LM backend 'tests.lm.test_backends:nope': cannot import its loader"):
        get_backend("tests.lm.test_backends:nope")
    with pytest.raises(ValueError, match=r"cannot import its loader 'no_such_module_xyz:load'"):
        get_backend("no_such_module_xyz:load")
    assert "no_such_module_xyz:load" not in registered()  # a failed import is not left registered
    with pytest.raises(ValueError, match=r"VOCAB' is not a callable loader"):
        get_backend("tests.lm.test_backends:VOCAB")
    assert "tests.lm.test_backends:VOCAB" not in registered()


def test_the_backend_flag_reaches_the_spec_and_a_bad_one_is_refused_before_any_work(capsys, monkeypatch):
    from cli_run import run

    isolate(monkeypatch)
    code, out, err = run(capsys, "score", "ab", "--model", "x", "--backend", "tests.lm.test_backends:toy_loader",
                         "--json")
    assert code == 0, err
    code, _, err = run(capsys, "score", "ab", "--backend", "vllm")
    assert code == 2 and "unknown LM backend 'vllm'" in err
    code, _, err = run(capsys, "score", "ab", "--backend", "no_such_module_xyz:load")
    assert code == 2 and "cannot import its loader" in err


# loaders that misbehave (issue 56): each is one line naming the backend and what was wrong
def returns_str(spec, *, config=None, **options):
    return "an LM"


def returns_none(spec, *, config=None, **options):
    return None


def raises(spec, *, config=None, **options):
    raise RuntimeError("the GPU caught fire")


def no_config(spec):
    return BigramLM(VOCAB, torch.full((4, 4), 0.25), bos_id=0)


MISBEHAVING = [("returns_str", "returned str 'an LM'", "not a LanguageModel"),
               ("returns_none", "returned NoneType", "not a LanguageModel"),
               ("raises", "failed loading 'x': RuntimeError: the GPU caught fire", ""),
               ("no_config", "cannot be called as loader(spec, config=..., head_fp32=...)", "def load(spec, *")]


@pytest.mark.parametrize("function, needle, hint", MISBEHAVING)
def test_a_misbehaving_loader_is_one_error_naming_the_backend(monkeypatch, function, needle, hint):
    from ppl_tok.lm.backends import BackendError

    isolate(monkeypatch)  # a module:function backend registers itself: not left behind
    name = f"tests.lm.test_backends:{function}"
    with pytest.raises(BackendError) as err:
        load_lm(LMSpec(model="x", backend=name))
    assert f"LM backend {name!r}" in str(err.value) and needle in str(err.value), err.value
    assert hint in str(err.value), err.value
    assert isinstance(err.value, ValueError) and "\n" not in str(err.value)
