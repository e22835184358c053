"""``run_perplexity``: the summary covers exactly the documents asked for (issue 37, finding 2)."""

from __future__ import annotations

import json

from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.corpus import Corpus
from ppl_tok.perplexity.run import run_perplexity
from qa_toy import toy_lm


def test_a_smaller_limit_on_an_existing_folder_covers_only_those_documents(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("a b c", "ab ba", "c a", "b b a")))
    corpus = read_corpus(path, field="text")
    full = run_perplexity(toy_lm(), corpus, ScoringConfig("canonical"), out=tmp_path / "run", field="text",
                          progress=False)
    assert len(full) == 4
    first = Corpus(corpus.source, corpus.documents[:1], corpus.sha256)  # --limit 1
    again = run_perplexity(toy_lm(), first, ScoringConfig("canonical"), out=tmp_path / "run", field="text",
                           progress=False)
    assert [s.index for s in again] == [0]
    assert again[0].to_record() == full[0].to_record()


def test_prefix_and_with_end_folders_resume_and_refuse_each_other(tmp_path):
    """The store records the scoring and the beam's settings; a resume under another scoring is refused."""
    import pytest

    from ppl_tok.common.jsonl_store import StoreError
    from ppl_tok.perplexity.store import PerplexityStore
    from ppl_tok.strings.beam import StringSearchConfig

    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("a b c", "ab ba", "c a", "b b a")))
    corpus = read_corpus(path, field="text")
    config = ScoringConfig("with-end", search=StringSearchConfig(beam=3))
    ref = run_perplexity(toy_lm(), corpus, config, out=tmp_path / "run", field="text", progress=False, batch_docs=3)
    settings = PerplexityStore.read_settings(tmp_path / "run")
    assert (settings["scoring"], settings["beam"], settings["prune_against"]) == ("with-end", 3, "offset")
    records = tmp_path / "run" / PerplexityStore.records_file
    records.write_bytes(records.read_bytes()[:-10])  # a torn last record: the fourth document again
    again = run_perplexity(toy_lm(), corpus, config, out=tmp_path / "run", field="text", progress=False)
    assert [s.to_record() for s in again] == [s.to_record() for s in ref]
    with pytest.raises(StoreError, match="scoring: folder has 'with-end', this run has 'prefix'"):
        run_perplexity(toy_lm(), corpus, ScoringConfig("prefix", search=StringSearchConfig(beam=3)),
                       out=tmp_path / "run", field="text", progress=False)


def test_with_end_without_an_end_token_is_refused_before_a_folder_is_made(tmp_path):
    import pytest

    from ppl_tok import FunctionLM, Vocabulary

    path = tmp_path / "c.txt"
    path.write_text("ab")
    lm = FunctionLM(Vocabulary.from_tokens(["^", "a", "b"]), lambda p: [0.0, 0.0, 0.0], bos_id=0, log=True)
    with pytest.raises(ValueError, match="has no EOS or other special token.*--scoring beam"):
        run_perplexity(lm, read_corpus(path), ScoringConfig("with-end"), out=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_the_bar_moves_inside_a_beam_scored_document_and_ends_at_the_corpus_bytes(tmp_path, monkeypatch):
    """One long document under ``beam``: the bar advances as the sweep goes past its bytes, not only at its end."""
    import ppl_tok.perplexity.run as run_module
    from ppl_tok.strings.beam import StringSearchConfig

    updates: list[int] = []

    class Bar:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            updates.append(n)

    monkeypatch.setattr(run_module, "progress_bar", lambda *a, **k: Bar())
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"text": "a b c a b b a c a b"}) + "\n")
    corpus = read_corpus(path, field="text")
    config = ScoringConfig("beam", search=StringSearchConfig(beam=2))
    run_perplexity(toy_lm(), corpus, config, out=tmp_path / "run", field="text")
    assert len(updates) > 3 and sum(updates) == corpus.n_bytes and all(n >= 0 for n in updates)
    assert sum(updates[:-1]) >= corpus.n_bytes // 2  # most of the document was shown before it was done
