"""The run folder (``ppl_tok/perplexity/store.py``): resumes, SIGKILL-safe, and refuses records made under other
settings (issue 37, finding 1)."""

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
from ppl_tok.perplexity import (
    corpus_from_texts,
)
from sigkill import killed_twice_then_finished
from tests.perplexity import DOCS, TESTS

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


def _corpus_file(tmp_path, n=24):
    path = tmp_path / "corpus.jsonl"
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"text": DOCS[i % len(DOCS)] + " " + "ab" * (i % 3)}) + "\n")
    return path


def test_store_resumes_and_refuses_other_settings(tmp_path):
    corpus = read_corpus(_corpus_file(tmp_path, 6), field="text")
    ref = run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", batch_docs=2,
                         progress=False)
    path = tmp_path / "run" / PerplexityStore.records_file
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])  # a torn last line
    again = run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", batch_docs=2,
                           progress=False)
    assert path.read_bytes() == data and [s.to_record() for s in again] == [s.to_record() for s in ref]
    with pytest.raises(StoreError, match="beam: folder has 8, this run has 2"):
        run_perplexity(toy_lm(), corpus, ScoringConfig("beam", search=StringSearchConfig(beam=2)), out=tmp_path / "run",
                       progress=False)
    path.write_bytes(data + b"{broken}\n")
    with pytest.raises(StoreError, match=r"documents.jsonl:7: not a document record"):
        run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", progress=False)


def test_run_json_records_the_lm_spec_and_a_folder_without_it_resumes(tmp_path):
    from ppl_tok.lm.spec import LMSpec

    corpus = read_corpus(_corpus_file(tmp_path, 4), field="text")
    lm = toy_lm()
    ref = run_perplexity(lm, corpus, ScoringConfig("marginal"), out=tmp_path / "run", progress=False)
    settings = PerplexityStore.read_settings(tmp_path / "run")
    assert settings["lm"] is None  # an LM built in Python has no spec
    lm.spec = LMSpec(model="toy", backend="toy", bos_id=lm.bos_id)  # as load_lm leaves it
    run_perplexity(lm, corpus, ScoringConfig("marginal"), out=tmp_path / "spec", progress=False, model="toy")
    assert PerplexityStore.read_settings(tmp_path / "spec")["lm"] == lm.spec.to_dict()
    spec = LMSpec(model="toy", dtype="bfloat16")
    run_perplexity(toy_lm(), corpus, ScoringConfig("marginal"), out=tmp_path / "given", progress=False, spec=spec)
    assert PerplexityStore.read_settings(tmp_path / "given")["lm"] == spec.to_dict()
    # a folder from before "lm" resumes, and keeps its run.json
    old = {k: v for k, v in settings.items() if k != "lm"}
    (tmp_path / "run" / "run.json").write_text(json.dumps(old))
    again = run_perplexity(toy_lm(), corpus, ScoringConfig("marginal"), out=tmp_path / "run", progress=False)
    assert [s.to_record() for s in again] == [s.to_record() for s in ref]
    assert PerplexityStore.read_settings(tmp_path / "run") == old


CHILD = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]  # the checkout's ppl_tok, not another install's
from qa_toy import toy_lm
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.run import run_perplexity
from ppl_tok.strings.beam import StringSearchConfig
config = ScoringConfig("beam", search=StringSearchConfig(beam=16))
run_perplexity(toy_lm(), read_corpus({corpus!r}, field="text"), config, out={out!r}, batch_docs=1, progress=False)
"""


@pytest.mark.slow  # child processes, each importing torch: 95 s in the loaded profile (issue 45)
def test_sigkill_at_any_point_resumes_to_the_uninterrupted_store(tmp_path):
    corpus_path = _corpus_file(tmp_path, 40)
    ref = tmp_path / "ref"
    run_perplexity(toy_lm(), read_corpus(corpus_path, field="text"),
                   ScoringConfig("beam", search=StringSearchConfig(beam=16)), out=ref, batch_docs=1, progress=False)
    reference = (ref / PerplexityStore.records_file).read_bytes()
    out = tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(TESTS), root=str(TESTS.parent), corpus=str(corpus_path), out=str(out)))
    records = out / PerplexityStore.records_file
    killed_twice_then_finished(script, records, reference.count(b"\n"))
    assert sorted(records.read_bytes().splitlines()) == sorted(reference.splitlines())


def test_a_folder_stored_under_the_old_name_resumes(tmp_path):
    """Run folders written before the rename say ``marginal``: they resume, and read as ``beam``."""
    from ppl_tok.perplexity.report import read_scores

    corpus = corpus_from_texts(DOCS)
    run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", progress=False)
    settings_file = tmp_path / "run" / "run.json"
    old = json.loads(settings_file.read_text())
    settings_file.write_text(json.dumps({**old, "scoring": "marginal"}))
    again = run_perplexity(toy_lm(), corpus, ScoringConfig("marginal"), out=tmp_path / "run", progress=False)
    assert len(again) == len(DOCS) and json.loads(settings_file.read_text())["scoring"] == "marginal"
    settings, scores = read_scores(tmp_path / "run")
    assert settings["scoring"] == "beam" and len(scores) == len(DOCS)


def test_an_old_folders_settings_are_what_its_scoring_says_of_them(request):
    """``complete`` fills in what the folder's scoring knows of its older folders (``Scoring.legacy_settings``),
    only where absent: ``beam`` its pruning and ``exhaustive``, ``prefix`` and ``with-end`` ``exhaustive`` (where a
    beam width is recorded), other scorings nothing, a user's scoring what its hook says."""
    from ppl_tok import scorings

    complete = PerplexityStore.complete
    assert {k: complete({"scoring": "beam", "beam": 8})[k] for k in ("prune_against", "exhaustive")} == {
        "prune_against": "offset", "exhaustive": True}
    assert complete({"scoring": "beam", "beam": 8, "prune_against": "step", "exhaustive": True,
                     "extend_threshold": 0.1})["prune_against"] == "step"
    for name in ("prefix", "with-end"):
        assert complete({"scoring": name, "beam": 8, "extend_threshold": 0.1})["exhaustive"] is False
        assert "prune_against" not in complete({"scoring": name, "beam": 8})
        assert "exhaustive" not in complete({"scoring": name})
    assert not {"prune_against", "exhaustive"} & set(complete({"scoring": "canonical+rest", "beam": 8}))
    assert not {"prune_against", "exhaustive"} & set(complete({"scoring": "not-registered", "beam": 8}))

    class Old(scorings.Scoring):
        name, estimator, levels, doc = "old-toy", "the beam, again", (scorings.DOCUMENT,), "a scoring with a past"

        def score_documents(self, lm, docs, config, *, on_bytes=None):
            return scorings.SCORINGS["beam"].score_documents(lm, docs, ScoringConfig("beam"))

        def legacy_settings(self, settings):
            return {"knob": settings.get("beam", 0) + 1}

    scorings.register(Old)
    request.addfinalizer(lambda: scorings.unregister("old-toy"))
    assert complete({"scoring": "old-toy", "beam": 2})["knob"] == 3
    assert complete({"scoring": "old-toy", "knob": 7})["knob"] == 7


def test_a_beam_folder_from_before_exhaustive_was_recorded_resumes_under_its_setting(tmp_path):
    """``exhaustive`` is filled in for older beam folders: no lazy share recorded means every prefix was run."""
    corpus = corpus_from_texts(DOCS)
    full = ScoringConfig("beam", exhaustive=True)
    ref = run_perplexity(toy_lm(), corpus, full, out=tmp_path / "run", progress=False)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["exhaustive"] is True
    _old(tmp_path, ("exhaustive",))
    again = run_perplexity(toy_lm(), corpus, full, out=tmp_path / "run", progress=False)
    assert [s.to_record() for s in again] == [s.to_record() for s in ref]
    with pytest.raises(SettingsMismatchError, match=r"exhaustive: folder has True, this run has False \(the "
                                                    r"folder's run: --exhaustive\)"):
        run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=tmp_path / "run", progress=False)
    lazy = ScoringConfig("beam", search=StringSearchConfig(extend_threshold=0.01))
    run_perplexity(toy_lm(), corpus, lazy, out=tmp_path / "lazy", progress=False)
    settings_file = tmp_path / "lazy" / "run.json"
    settings = json.loads(settings_file.read_text())
    assert settings["exhaustive"] is False and settings["extend_threshold"] == 0.01
    settings_file.write_text(json.dumps({k: v for k, v in settings.items() if k != "exhaustive"}))
    assert len(run_perplexity(toy_lm(), corpus, lazy, out=tmp_path / "lazy", progress=False)) == len(DOCS)
