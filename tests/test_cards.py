import pytest

from ppl_tok import ModelCard, ModelNotFoundError, list_cards, load_lm, load_vocabulary
from ppl_tok.cards import _gguf_path, cache_dir


def test_cards_cover_bundled_and_paper_models():
    cards = list_cards()
    assert {"smollm2-135m", "gemma3-270m", "llama2-7b", "gemma-2b", "mamba-130m"} <= set(cards)
    assert cards["smollm2-135m"].bos_id == 0 and cards["gemma3-270m"].bos_id == 2
    assert cards["llama2-7b"].repo == "meta-llama/Llama-2-7b-hf"
    assert cards["mamba-130m"].kind == "hub"


def test_card_validation():
    with pytest.raises(ValueError, match="source kind"):
        ModelCard(name="x", description="", kind="ftp", bos_id=0)
    with pytest.raises(ValueError, match="dtype"):
        ModelCard(name="x", description="", kind="hub", repo="a/b", bos_id=0, dtype="int3")
    with pytest.raises(ValueError, match="needs 'package'"):
        ModelCard(name="x", description="", kind="gguf-package", bos_id=0)


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ModelNotFoundError, match="unknown model 'no-such-model'"):
        load_lm("no-such-model")
    with pytest.raises(ModelNotFoundError, match="unknown model"):
        load_vocabulary("no-such-model")


def test_missing_package_says_what_to_install():
    card = ModelCard(name="ghost", description="", kind="gguf-package", package="no_such_pkg_xyz",
                     file="x.gguf", install="pip install no-such-pkg", bos_id=0)
    with pytest.raises(ModelNotFoundError, match="pip install no-such-pkg"):
        _gguf_path(card)


def test_cache_dir_is_configurable(monkeypatch, tmp_path):
    monkeypatch.setenv("PPL_TOK_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path


def test_local_folder_loads(tmp_path, smollm2):
    folder = cache_dir() / "smollm2-135m" / "model"
    lm = load_lm(str(folder), bos_id=0)
    assert lm.canonical_log_prob(" Paris", "The capital of France is") == pytest.approx(
        smollm2.canonical_log_prob(" Paris", "The capital of France is"), abs=1e-4)
