"""A resumed perplexity run refuses records made under other settings (issue 37, finding 1)."""

from __future__ import annotations

import json

import pytest

from ppl_tok.common.jsonl_store import SettingsMismatchError, StoreError
from ppl_tok.lm.spec import LMSpec
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.run import run_perplexity
from ppl_tok.perplexity.store import PerplexityStore
from ppl_tok.strings.beam import StringSearchConfig
from qa_toy import toy_lm

PARAGRAPHS = "a b\nc a\n\nab ba\nb\n\nc a b b\n"


def _text(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text(PARAGRAPHS)
    return path


def _jsonl(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": t, "title": t[::-1] + " b"}) + "\n" for t in ("a b c", "ab ba", "c a")))
    return path


def _run(path, out, *, field=None, split="none", config=ScoringConfig("canonical"), spec=None, lm=None):
    corpus = read_corpus(path, field=field, split=split)
    return run_perplexity(lm or toy_lm(), corpus, config, out=out, field=field, split=split, spec=spec,
                          progress=False)


def _newline_lm():
    from ppl_tok import BigramLM, Vocabulary
    from qa_toy import TOKENS

    return BigramLM.random(Vocabulary.from_tokens(TOKENS + ["\n"]), seed=0, bos_id=0, name="toy-newline")


def test_a_resume_with_another_split_is_refused(tmp_path):
    path = _text(tmp_path)
    _run(path, tmp_path / "run", split="paragraphs", lm=_newline_lm())
    with pytest.raises(SettingsMismatchError, match="split: folder has 'paragraphs', this run has 'none'"):
        _run(path, tmp_path / "run", split="none", lm=_newline_lm())


def test_a_resume_with_another_field_is_refused(tmp_path):
    path = _jsonl(tmp_path)
    _run(path, tmp_path / "run", field="text")
    with pytest.raises(SettingsMismatchError, match="field: folder has 'text', this run has 'title'"):
        _run(path, tmp_path / "run", field="title")


@pytest.mark.parametrize("first, then, message", [
    (LMSpec("toy", dtype="float32"), LMSpec("toy", dtype="bfloat16"), "dtype: folder has 'float32', this run has 'bfloat16'"),
    (LMSpec("toy"), LMSpec("toy", device="cuda:0"), "device: folder has 'cpu', this run has 'cuda'"),
    (LMSpec("toy"), LMSpec("toy", backend="other"), "backend: folder has 'transformers', this run has 'other'"),
])
def test_a_resume_with_another_dtype_device_or_backend_is_refused(tmp_path, first, then, message):
    path = _jsonl(tmp_path)
    _run(path, tmp_path / "run", field="text", spec=first)
    with pytest.raises(SettingsMismatchError, match=message):
        _run(path, tmp_path / "run", field="text", spec=then)


def test_the_device_index_changes_nothing(tmp_path):
    path = _jsonl(tmp_path)
    _run(path, tmp_path / "run", field="text", spec=LMSpec("toy", device="cuda:0"))
    assert len(_run(path, tmp_path / "run", field="text", spec=LMSpec("toy", device="cuda:1"))) == 3
    assert PerplexityStore.read_settings(tmp_path / "run")["device"] == "cuda"


def test_every_search_setting_is_compared(tmp_path):
    path = _jsonl(tmp_path)
    _run(path, tmp_path / "run", field="text", config=ScoringConfig("beam"))
    settings = PerplexityStore.read_settings(tmp_path / "run")
    assert {k: settings[k] for k in ("beam", "prune", "budget", "prune_against")} == {
        "beam": 8, "prune": 12.0, "budget": None, "prune_against": "offset"}
    with pytest.raises(SettingsMismatchError, match="budget: folder has None, this run has 50"):
        _run(path, tmp_path / "run", field="text", config=ScoringConfig("beam", search=StringSearchConfig(budget=50)))


def test_a_folder_of_other_documents_is_refused(tmp_path):
    """Even where the settings agree (an old folder), a stored record of another length is not reused."""
    path = _jsonl(tmp_path)
    _run(path, tmp_path / "run", field="text")
    records = tmp_path / "run" / PerplexityStore.records_file
    lines = records.read_text().splitlines()
    first = json.loads(lines[0])
    records.write_text("\n".join([json.dumps({**first, "n_bytes": 99}), *lines[1:]]) + "\n")
    with pytest.raises(StoreError, match="document 0 was stored with 99 bytes, this run's has 5"):
        _run(path, tmp_path / "run", field="text")


def _old(tmp_path, drop, **extra):
    settings_file = tmp_path / "run" / "run.json"
    settings = json.loads(settings_file.read_text())
    settings_file.write_text(json.dumps({**{k: v for k, v in settings.items() if k not in drop}, **extra}))


def test_a_folder_written_before_the_lm_identity_resumes_from_its_lm_entry(tmp_path):
    path = _jsonl(tmp_path)
    spec = LMSpec("toy", dtype="bfloat16")
    ref = _run(path, tmp_path / "run", field="text", spec=spec, config=ScoringConfig("beam"))
    _old(tmp_path, ("backend", "dtype", "device", "prune_against"))  # as written before this release's keys
    again = _run(path, tmp_path / "run", field="text", spec=spec, config=ScoringConfig("beam"))
    assert [s.to_record() for s in again] == [s.to_record() for s in ref]
    with pytest.raises(SettingsMismatchError, match="dtype: folder has 'bfloat16', this run has None"):
        _run(path, tmp_path / "run", field="text", spec=LMSpec("toy"), config=ScoringConfig("beam"))


def test_a_folder_of_0_1_0_resumes_where_knowable_and_else_says_how_to_proceed(tmp_path):
    path = _jsonl(tmp_path)
    ref = _run(path, tmp_path / "run", field="text", spec=LMSpec("toy"))
    # 0.1.0 wrote no split, field, lm, backend, dtype or device
    _old(tmp_path, ("split", "field", "lm", "backend", "dtype", "device"), ppl_tok_version="0.1.0")
    with pytest.raises(SettingsMismatchError, match=r"backend, dtype, device: not recorded \(a folder of ppl-tok "
                                                    r"0.1.0\).*use a new --out folder"):
        _run(path, tmp_path / "run", field="text", spec=LMSpec("toy"))
    _old(tmp_path, (), backend="transformers", dtype=None, device="cpu")  # the fix the message names
    again = _run(path, tmp_path / "run", field="text", spec=LMSpec("toy"))
    assert [s.to_record() for s in again] == [s.to_record() for s in ref]
    with pytest.raises(SettingsMismatchError, match="field: folder has 'text', this run has 'title'"):
        _run(path, tmp_path / "run", field="title", spec=LMSpec("toy"))
