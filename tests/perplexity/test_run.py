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
