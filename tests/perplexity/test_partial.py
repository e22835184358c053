"""The partial work of a document in progress (``ppl_tok/perplexity/partial.py``, issue 51): one long document
SIGKILLed after its first checkpoints resumes mid-document and stores the uninterrupted run's record; the
checkpoint records follow the folder's rules (settings compared, a damaged line named)."""

from __future__ import annotations

import json
import random

import pytest

from ppl_tok.common.jsonl_store import SettingsMismatchError, StoreError
from ppl_tok.perplexity import ScoringConfig, corpus_from_texts, read_corpus
from ppl_tok.perplexity.partial import PartialStore
from ppl_tok.perplexity.run import run_perplexity
from ppl_tok.scorings.documents import score_documents
from ppl_tok.perplexity.store import PerplexityStore
from ppl_tok.strings.beam import StringSearchConfig
from qa_toy import toy_lm
from sigkill import kill_while_appending, line_count
from tests.perplexity import TESTS

SEARCH = StringSearchConfig(beam=16)

CHILD = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]  # the checkout's ppl_tok, not another install's
from qa_toy import toy_lm
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.run import run_perplexity
from ppl_tok.strings.beam import StringSearchConfig
config = ScoringConfig({scoring!r}, search=StringSearchConfig(beam=16))
run_perplexity(toy_lm(), read_corpus({corpus!r}), config, out={out!r}, progress=False, checkpoint_every=0)
"""


def _long_document(tmp_path, words=150):
    rng = random.Random(1)
    text = " ".join("".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 4))) for _ in range(words))
    path = tmp_path / "long.txt"
    path.write_text(text)
    return path


@pytest.mark.parametrize("scoring", ["beam", "with-end"])
def test_a_long_document_killed_mid_walk_resumes_there_to_the_uninterrupted_record(tmp_path, scoring):
    path = _long_document(tmp_path)
    config = ScoringConfig(scoring, search=SEARCH)
    lm = toy_lm()
    reference = run_perplexity(lm, read_corpus(path), config, progress=False)[0].to_record()
    whole = lm.stats.forwards
    out = tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(TESTS), root=str(TESTS.parent), scoring=scoring, corpus=str(path),
                                   out=str(out)))
    partial = out / PartialStore.records_file
    assert kill_while_appending(script, partial, delays=(0.0,), progress=40) == 1
    assert line_count(out / PerplexityStore.records_file) == 0  # the document was not done
    saved = line_count(partial)
    assert saved >= 40
    first, last = (json.loads(partial.read_bytes().splitlines()[i]) for i in (0, saved - 1))
    assert first["settings"] == json.loads((out / "run.json").read_text())  # the checkpoints carry their settings
    assert last["step"] == saved - 2 and 0 < last["record"]["offset"] < 0.9 * path.stat().st_size
    lm = toy_lm()
    resumed = run_perplexity(lm, read_corpus(path), config, out=out, progress=False, checkpoint_every=1e9)
    record = resumed[0].to_record()
    assert {k: v for k, v in record.items() if k != "seconds"} == {k: v for k, v in reference.items() if k != "seconds"}
    assert lm.stats.forwards < whole  # it went on from the checkpoint, not from the start
    stored = json.loads((out / PerplexityStore.records_file).read_text())
    assert stored["log_likelihood"] == reference["log_likelihood"] and stored["upper"] == reference["upper"]


def test_a_resume_with_another_setting_is_refused_before_the_checkpoints_are_read(tmp_path):
    corpus = read_corpus(_long_document(tmp_path, 30))
    out = tmp_path / "run"
    run_perplexity(toy_lm(), corpus, ScoringConfig("beam", search=SEARCH), out=out, progress=False,
                   checkpoint_every=0, limit_seconds=None)
    (out / PerplexityStore.records_file).write_text("")  # as if killed before the document's record
    assert line_count(out / PartialStore.records_file) > 5
    with pytest.raises(SettingsMismatchError, match="beam: folder has 16, this run has 8"):
        run_perplexity(toy_lm(), corpus, ScoringConfig("beam"), out=out, progress=False)
    data = (out / PartialStore.records_file).read_bytes()
    (out / PartialStore.records_file).write_bytes(data + b'{"index": 0, "window": 0}\n')
    with pytest.raises(StoreError, match=r"partial.jsonl:\d+: not a checkpoint record|no field 'step'"):
        run_perplexity(toy_lm(), corpus, ScoringConfig("beam", search=SEARCH), out=out, progress=False)
    lines = data.splitlines(keepends=True)
    (out / PartialStore.records_file).write_bytes(b"".join(lines[:3] + lines[4:]))  # a step missing (line 1: settings)
    with pytest.raises(StoreError, match="checkpoint step 3 follows 2 steps"):
        run_perplexity(toy_lm(), corpus, ScoringConfig("beam", search=SEARCH), out=out, progress=False)
    (out / PartialStore.records_file).write_bytes(data + data[:30])  # a torn last line is cut off
    again = run_perplexity(toy_lm(), corpus, ScoringConfig("beam", search=SEARCH), out=out, progress=False)
    fresh = run_perplexity(toy_lm(), corpus, ScoringConfig("beam", search=SEARCH), progress=False)
    assert again[0].log_likelihood == fresh[0].log_likelihood


@pytest.mark.parametrize("scoring", ["beam", "prefix", "with-end"])
def test_every_string_walk_of_a_document_reports_its_bytes(scoring):
    """Progress inside a document: the bytes of every window (the last window of prefix and with-end included),
    counted by a callback; the figures are those of an unwatched run."""
    docs = corpus_from_texts(["ab cd abc de fgh ba ab cd ef gh a", " a b c abc hgfe"]).documents
    config = ScoringConfig(scoring, search=StringSearchConfig(beam=4))
    seen: list[int] = []
    watched = score_documents(toy_lm(), docs, config, on_bytes=seen.append)
    assert len(seen) > len(docs) and all(n > 0 for n in seen)
    total = sum(d.n_bytes for d in docs)
    assert sum(seen) == (total if scoring != "beam" else total - len(docs))  # the sweep: up to the last offset
    plain = score_documents(toy_lm(), docs, config)
    assert [s.log_likelihood for s in watched] == [s.log_likelihood for s in plain]
