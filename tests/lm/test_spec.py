"""LMSpec: the one value naming an LM (validated, stored as JSON, loaded by load_lm)."""

import json

import pytest

from ppl_tok.lm.spec import DEFAULT_MODEL, LMSpec


def test_defaults_round_trip_through_json():
    spec = LMSpec(device="cpu", dtype="bfloat16", bos_id=1)
    assert spec.model == DEFAULT_MODEL and spec.backend == "transformers"
    assert LMSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert spec.options() == {"device": "cpu", "dtype": "bfloat16", "bos_id": 1}
    assert str(spec) == "smollm2-135m (device=cpu, dtype=bfloat16, bos_id=1)" and str(LMSpec()) == "smollm2-135m"


@pytest.mark.parametrize("kwargs, message", [
    ({"model": ""}, "LMSpec.model"), ({"dtype": "float64"}, "LMSpec.dtype must be one of"),
    ({"bos_id": -1}, "LMSpec.bos_id"), ({"bos_id": True}, "LMSpec.bos_id"), ({"bos_id": 1.5}, "LMSpec.bos_id"),
    ({"device": ""}, "LMSpec.device"), ({"backend": ""}, "LMSpec.backend"),
])
def test_bad_fields_are_errors_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LMSpec(**kwargs)


def test_unknown_stored_fields_are_refused():
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['window'\]"):
        LMSpec.from_dict({"model": "x", "window": 3})


def test_load_lm_refuses_an_unknown_backend_and_doubled_options():
    from ppl_tok.lm.cards import load_lm

    with pytest.raises(ValueError, match="unknown LM backend 'vllm'"):
        load_lm(LMSpec(backend="vllm"))
    with pytest.raises(TypeError, match="come from the LMSpec"):
        load_lm(LMSpec(), device="cpu")


def test_spec_loads_the_bundled_model(smollm2):
    from ppl_tok.lm.cards import load_lm

    spec = LMSpec(bos_id=smollm2.bos_id)
    lm = load_lm(spec)
    assert lm.name == smollm2.name and lm.bos_id == smollm2.bos_id and lm.spec == spec
    assert smollm2.spec == LMSpec()  # load_lm("smollm2-135m"): the spec it built
