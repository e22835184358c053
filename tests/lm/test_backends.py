"""The backend registry: load_lm dispatches on LMSpec.backend; a new backend is one loader and one registration."""

import pytest
import torch

from ppl_tok import BigramLM, Vocabulary
from ppl_tok.lm import backends
from ppl_tok.lm.backends import backends as registered, get_backend, register_backend, unregister_backend
from ppl_tok.lm.cards import load_lm
from ppl_tok.lm.spec import LMSpec

VOCAB = Vocabulary.from_tokens([None, "a", "b", "ab"])


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
    monkeypatch.setattr(backends, "_BACKENDS", dict(backends._BACKENDS))
    register_backend("toy", "ppl_tok.lm.hf_loader:load_transformers", replace=True)
    from ppl_tok.lm.hf_loader import load_transformers

    assert get_backend("toy") is load_transformers
    assert backends.BUILT_IN["transformers"] == "ppl_tok.lm.hf_loader:load_transformers"


def test_a_name_loads_as_a_transformers_spec(monkeypatch):
    seen = []
    monkeypatch.setattr(backends, "_BACKENDS", {"transformers": lambda spec, **kw: seen.append(spec) or
                                                BigramLM(VOCAB, torch.full((4, 4), 0.25), bos_id=0)})
    lm = load_lm("some-card", device=torch.device("cpu"), dtype=torch.bfloat16, bos_id=2)
    assert seen == [LMSpec(model="some-card", device="cpu", dtype="bfloat16", bos_id=2)] and lm.spec == seen[0]
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        load_lm("some-card", dtype="int8")
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        load_lm("some-card", device="gpu0")
