"""``LMLoader``: the picklable loader of an ``LMSpec`` that Ray actors build their LM with."""


def test_the_lm_loader_loads_an_lm_spec(monkeypatch):
    import ppl_tok.lm.cards
    from ppl_tok.lm.spec import LMSpec
    from ppl_tok.lm.loader import LMLoader

    spec = LMSpec(model="m", device="cpu", dtype="bfloat16", bos_id=2)
    loader = LMLoader.from_spec(spec)
    assert loader.spec() == spec and LMLoader("m", None, "float16").spec("cuda") == LMSpec("m", device="cuda",
                                                                                           dtype="float16")
    seen = []
    monkeypatch.setattr(ppl_tok.lm.cards, "load_lm", lambda *a, **k: seen.append((a, k)) or "lm")
    assert loader() == "lm" and seen == [((spec,), {})]
