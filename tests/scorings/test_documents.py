"""The scorings of a document (``ppl_tok/scorings/documents.py``) against exact values on toy LMs."""

from __future__ import annotations
import math
import pytest
from ppl_tok.infer.exact import exact_marginal
from ppl_tok.perplexity import (
    ScoringConfig,
    corpus_from_texts,
    rolling_windows,
    score_documents,
)
from ppl_tok.perplexity.report import corpus_summary
from ppl_tok.scorings.registry import PAIR
from ppl_tok.strings.beam import StringSearchConfig
from qa_toy import toy_lm
from tests.perplexity import DOCS


def test_canonical_windows_of_a_bigram_lm_equal_the_whole_document():
    """A bigram LM sees only the previous token, which every window keeps: windows change nothing."""
    lm = toy_lm()
    corpus = corpus_from_texts(DOCS)
    whole = score_documents(lm, corpus.documents, ScoringConfig("canonical"))
    windowed = score_documents(lm, corpus.documents, ScoringConfig("canonical", window=3))
    for d, a, b in zip(corpus.documents, whole, windowed):
        assert a.log_likelihood == pytest.approx(lm.canonical_log_prob(d.text), abs=1e-12)
        assert b.log_likelihood == pytest.approx(a.log_likelihood, abs=1e-12)
        assert a.windows == 1 and b.windows == len(rolling_windows(b.n_tokens, 3))
    assert max(b.windows for b in windowed) >= 3


def test_marginal_brackets_the_exact_marginal_and_beats_canonical():
    lm = toy_lm()
    corpus = corpus_from_texts(DOCS)
    scores = score_documents(lm, corpus.documents, ScoringConfig("beam", search=StringSearchConfig(beam=4)))
    for d, s in zip(corpus.documents, scores):
        exact = exact_marginal(d.text, lm).log_marginal
        assert s.canonical <= s.lower + 1e-12
        assert s.lower <= exact + 1e-9 <= s.upper + 2e-9
        assert s.lower <= s.log_likelihood <= s.lower + 1e-12  # the floor: the mass found less the tolerance
    wide = score_documents(lm, corpus.documents,
                           ScoringConfig("beam", search=StringSearchConfig(beam=100_000, prune=math.inf)))
    for d, s in zip(corpus.documents, wide):  # nothing pruned on these short strings: exact
        assert s.lower == pytest.approx(exact_marginal(d.text, lm).log_marginal, abs=1e-9)


@pytest.mark.parametrize("window", [None, 5])
def test_span_gain_adds_up_to_the_gain_over_canonical(window):
    lm = toy_lm()
    for s in score_documents(lm, corpus_from_texts(DOCS + ["abc de fgh ab cd ef gh ba ab"]).documents,
                             ScoringConfig("beam", window=window, search=StringSearchConfig(beam=4))):
        record = s.extra["span_gain"]
        assert record["version"] == 1
        spans = sum(nats for _, _, nats in record["spans"])
        assert spans + record["rest"] == pytest.approx(s.log_likelihood - s.canonical, abs=1e-9)
        assert 0 <= record["single_span"] <= s.log_likelihood - s.canonical + 1e-9
        assert all(0 <= a < b <= s.n_bytes and nats >= 0 for a, b, nats in record["spans"])


@pytest.mark.parametrize("window", [None, 5])
def test_a_batch_of_documents_scores_as_each_document_alone(window):
    """Marginal documents (and their windows) are swept in lockstep; each record is the one it gets alone."""
    lm = toy_lm()
    docs = corpus_from_texts(DOCS + ["abc de fgh ab cd ef gh ba ab"]).documents
    config = ScoringConfig("beam", window=window, search=StringSearchConfig(beam=3, prune=2.0))
    batch = score_documents(lm, docs, config)
    for d, s in zip(docs, batch):
        (alone,) = score_documents(lm, [d], config)
        got, want = s.to_record(), alone.to_record()
        assert got == want


def test_windowed_marginal_holds_the_canonical_slice_and_bounds():
    lm = toy_lm()
    corpus = corpus_from_texts(["abc de fgh ab cd ef gh ba ab"])
    (s,) = score_documents(lm, corpus.documents, ScoringConfig("beam", window=5))
    assert s.windows > 1
    assert s.canonical <= s.lower <= s.upper


def test_canonical_plus_rest_is_unbiased_on_average():
    """log(p(v*) + m): exp of it averages to the exact marginal over seeds (12 seeds, 4 sigma)."""
    lm = toy_lm()
    corpus = corpus_from_texts(["abc de"])
    exact = exact_marginal("abc de", lm).log_marginal
    values = [math.exp(score_documents(lm, corpus.documents, ScoringConfig("canonical+rest", num_samples=8,
                                                                            seed=s))[0].log_likelihood)
              for s in range(12)]
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    assert abs(mean - math.exp(exact)) <= 4 * sd / len(values) ** 0.5 + 1e-12
    s = score_documents(lm, corpus.documents, ScoringConfig("canonical+rest", num_samples=8))[0]
    assert s.lower == pytest.approx(s.canonical) and s.log_likelihood >= s.canonical
    # the plain importance estimate of the same particles, and what they certify
    from ppl_tok.infer.importance import marginals
    from ppl_tok.common.seeds import pair_seed

    (r,) = marginals(["abc de"], lm, 8, seeds=[pair_seed(0, "perplexity", "0", 0)])
    assert s.extra["is_estimate"] == pytest.approx(r.log_marginal, abs=1e-12)
    assert s.canonical - 1e-12 <= s.extra["is_certified_lower"] <= exact + 1e-9


def test_an_unknown_scoring_is_an_error():
    """Every dispatcher looks its name up in ppl_tok.scorings: no silent fallback to another scoring."""
    with pytest.raises(ValueError, match=r"unknown scoring 'nonsense' .*canonical, beam, prefix, with-end, "
                                         r"canonical\+rest"):
        ScoringConfig("nonsense")
    config = ScoringConfig("importance", level=PAIR)  # resolved once, at the edge: a scoring of requests
    with pytest.raises(ValueError, match="unknown scoring 'importance' for documents"):
        score_documents(toy_lm(), corpus_from_texts(["ab"]).documents, config)
    scores = score_documents(toy_lm(), corpus_from_texts(["ab"]).documents, ScoringConfig("canonical"))
    with pytest.raises(ValueError, match="unknown scoring 'importance'"):  # a scoring of requests, not of documents
        corpus_summary(scores, "importance")


def test_marginal_is_the_old_name_of_beam():
    config = ScoringConfig("marginal", search=StringSearchConfig(beam=3))
    assert config == ScoringConfig("beam", search=StringSearchConfig(beam=3))
    assert config.settings() == {"scoring": "beam", "window": None, "beam": 3, "prune": StringSearchConfig.prune,
                                 "budget": None, "prune_against": "offset", "exhaustive": True}
    with pytest.raises(ValueError, match="prune_against"):
        ScoringConfig("beam", search=StringSearchConfig(prune_against="text"))


def test_no_bos_is_a_clear_error():
    from ppl_tok import BigramLM, Vocabulary

    lm = BigramLM.random(Vocabulary.from_tokens([None, "a", "b"]), seed=0, bos_id=None)
    with pytest.raises(ValueError, match="no BOS"):
        score_documents(lm, corpus_from_texts(["ab"]).documents, ScoringConfig("canonical"))


# ---------------------------------------------------------------- prefix and with-end (issue 35)
EVENT_DOCS = [" ab cd", "abc de", " a b c", "hgfe ab", "ba ab c"]
WIDE = StringSearchConfig(beam=100_000, prune=math.inf)


def _brute_event(lm, text, context, event):
    """The event of one window by enumeration: the prefix, the text exactly, or the text then the end."""
    from tests.strings.test_state import brute_exact, brute_prefix, tokenizations
    from ppl_tok.common.logspace import logsumexp

    x = text.encode()
    if event == "prefix":
        return brute_prefix(lm, x, context)
    if event == "with-end":
        if not context:
            return brute_exact(lm, x)
        special = sorted(lm.vocab.special_ids)
        return logsumexp(lm.log_prob(v, context) + float(lm.state(lm.prefix_ids(context) + v).log_probs[special]
                                                         .logsumexp(0)) for v in tokenizations(x, lm.vocab))
    return logsumexp(lm.log_prob(v, context) for v in tokenizations(x, lm.vocab))


@pytest.mark.parametrize("scoring", ["prefix", "with-end"])
@pytest.mark.parametrize("window", [None, 4])
def test_prefix_and_with_end_equal_enumeration_over_token_sequences(scoring, window):
    """Each document: the event of its last window, the text of the windows before it (sums over windows)."""
    from ppl_tok.scorings.windows import text_windows

    lm = toy_lm()
    docs = corpus_from_texts(EVENT_DOCS).documents
    scores = score_documents(lm, docs, ScoringConfig(scoring, window=window, search=WIDE))
    for d, s in zip(docs, scores):
        pieces = text_windows(lm.vocab, lm.canonical(d.text), window)
        want = math.fsum(_brute_event(lm, p.text, p.context, scoring if k == len(pieces) - 1 else "text")
                         for k, p in enumerate(pieces))
        assert s.windows == len(pieces)
        assert s.lower == pytest.approx(want, abs=1e-9) and s.upper == pytest.approx(want, abs=1e-9)
        assert s.log_likelihood == s.lower and s.canonical <= s.lower + 1e-12
    if window is not None:
        assert max(s.windows for s in scores) > 1


@pytest.mark.parametrize("scoring", ["prefix", "with-end"])
def test_prefix_and_with_end_bracket_the_event_under_a_narrow_beam(scoring):
    lm = toy_lm(3)
    docs = corpus_from_texts(EVENT_DOCS).documents
    narrow = score_documents(lm, docs, ScoringConfig(scoring, search=StringSearchConfig(beam=1, prune=1.0)))
    for d, s in zip(docs, narrow):
        exact = _brute_event(lm, d.text, (), scoring)
        assert s.lower - 1e-9 <= exact <= s.upper + 1e-9
        assert s.canonical <= s.lower + 1e-12
    canonical = score_documents(lm, docs, ScoringConfig("canonical"))
    for s, c in zip(narrow, canonical):  # the canonical tokens: one covering / one tokenization then the end
        if scoring == "prefix":
            assert s.canonical == pytest.approx(c.log_likelihood, abs=1e-9)
        else:
            assert s.canonical < c.log_likelihood


@pytest.mark.parametrize("scoring", ["prefix", "with-end"])
@pytest.mark.parametrize("window", [None, 5])
def test_a_batch_of_event_documents_scores_as_each_alone(scoring, window):
    lm = toy_lm()
    docs = corpus_from_texts(EVENT_DOCS + ["abc de fgh ab cd ef gh ba ab"]).documents
    config = ScoringConfig(scoring, window=window, search=StringSearchConfig(beam=3, prune=2.0))
    for d, s in zip(docs, score_documents(lm, docs, config)):
        (alone,) = score_documents(lm, [d], config)
        assert s.to_record() == alone.to_record()


def test_with_end_needs_a_token_without_a_surface():
    from ppl_tok import FunctionLM, Vocabulary
    from ppl_tok.strings import EndUnavailableError

    vocab = Vocabulary.from_tokens(["^", "a", "b", "ab"])  # BOS is "^", a token with a surface: no end
    lm = FunctionLM(vocab, lambda p: [0.0, 0.0, 0.0, 0.0], bos_id=0, log=True)
    docs = corpus_from_texts(["ab"]).documents
    with pytest.raises(EndUnavailableError, match="no EOS or other special token.*--scoring beam"):
        score_documents(lm, docs, ScoringConfig("with-end"))
    (s,) = score_documents(lm, docs, ScoringConfig("prefix", search=WIDE))
    assert s.lower == pytest.approx(math.log(1 / 4 + 1 / 4 * 1 / 4), abs=1e-12)  # "ab", or "a" then "b"


@pytest.mark.slow  # SmolLM2, three scorings of a document: 263 s in the loaded profile (issue 45)
def test_on_smollm2_prefix_text_and_with_end_nest(smollm2):
    """P(x, end) <= p(x) <= P(x): certified bounds nest, and so do the estimates; canonical-then-end is
    one term of with-end (at most its floor)."""
    docs = corpus_from_texts(["The cat sat on the mat."]).documents
    search = StringSearchConfig(beam=4)
    got = {name: score_documents(smollm2, docs, ScoringConfig(name, search=search))
           for name in ("prefix", "beam", "with-end")}
    eos = smollm2.vocab.special_ids
    for k, d in enumerate(docs):
        prefix, text, end = (got[n][k] for n in ("prefix", "beam", "with-end"))
        assert end.upper >= end.lower and text.upper >= text.lower and prefix.upper >= prefix.lower
        assert prefix.upper >= text.lower and text.upper >= end.lower  # certified
        assert prefix.log_likelihood > text.log_likelihood > end.log_likelihood  # the estimates
        v = smollm2.canonical(d.text)
        row = smollm2.state(tuple(smollm2.prefix_ids()) + tuple(v)).log_probs[sorted(eos)].double().logsumexp(0)
        canonical_end = smollm2.canonical_log_prob(d.text) + float(row)
        assert end.canonical == pytest.approx(canonical_end, abs=1e-3)
        assert end.canonical <= end.lower + 1e-9
        assert prefix.canonical == pytest.approx(text.canonical, abs=1e-3)


def test_canonical_plus_rest_with_a_learned_proposal(tmp_path):
    """The proposal record in the config: its particles are those of marginals(..., guide=learned), stored settings."""
    from ppl_tok.common.seeds import pair_seed
    from ppl_tok.infer.importance import marginals
    from ppl_tok.common.logspace import logsumexp
    from ppl_tok.proposals import LearnedProposal, proposal_settings
    from qa_toy import learned_proposal_file

    lm = toy_lm()
    path = learned_proposal_file(tmp_path / "q.pt", lm)
    corpus = corpus_from_texts(["abc de"])
    config = ScoringConfig("canonical+rest", num_samples=8, proposal=proposal_settings("learned", path))
    assert config.settings()["proposal_sha256"] == proposal_settings("learned", path)["proposal_sha256"]
    assert "proposal" not in ScoringConfig("canonical+rest", num_samples=8).settings()  # old runs resume
    s = score_documents(lm, corpus.documents, config)[0]
    (r,) = marginals(["abc de"], lm, 8, seeds=[pair_seed(0, "perplexity", "0", 0)],
                     guide=LearnedProposal.load(path).guide)
    assert s.extra["is_estimate"] == pytest.approx(r.log_marginal, abs=1e-12)
    assert s.log_likelihood == pytest.approx(logsumexp([r.canonical_log_prob, r.noncanonical_estimate]), abs=1e-12)
    plain = score_documents(lm, corpus.documents, ScoringConfig("canonical+rest", num_samples=8))[0]
    assert s.extra["is_estimate"] != pytest.approx(plain.extra["is_estimate"], abs=1e-9)


@pytest.mark.parametrize("scoring", ["canonical", "canonical-local", "canonical-global"])
def test_the_canonical_scorings_report_progress_inside_one_large_document(scoring):
    """Issue 56: ``perplexity --progress`` stayed at 0% on one large document under ``canonical``. Every window's
    bytes are reported as it is scored (more than once inside the document), they sum to the document's bytes,
    and the figures are those of an unwatched run."""
    import random

    rng = random.Random(0)
    text = " ".join("".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 4))) for _ in range(60))
    docs = corpus_from_texts([text]).documents
    own = {"num_samples": 4} if scoring == "canonical-global" else {}  # the walks of its normalisers
    config = ScoringConfig(scoring, window=8, **own)
    seen: list[int] = []
    watched = score_documents(toy_lm(), docs, config, on_bytes=seen.append)
    assert len(seen) > 10 and all(n > 0 for n in seen) and sum(seen) == docs[0].n_bytes
    plain = score_documents(toy_lm(), docs, config)
    assert [s.log_likelihood for s in watched] == [s.log_likelihood for s in plain]


def test_canonical_plus_rest_reports_progress_inside_one_large_document():
    """Issue 56: under ``canonical+rest`` the bar moved once per document (all windows' particles run in one
    :func:`~ppl_tok.infer.importance.marginals` call). Each window's bytes are now reported as its particles
    finish: more than once inside one document, summing to its bytes, while the runs go on (a small
    ``particle_bytes`` splits them), and every figure is bit-identical to an unwatched run with the same seeds."""
    import random
    from dataclasses import replace

    rng = random.Random(1)
    text = " ".join("".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 4))) for _ in range(40))
    docs = corpus_from_texts([text]).documents
    config = ScoringConfig("canonical+rest", window=8, num_samples=4, seed=3)

    def run(on_bytes=None):
        lm = toy_lm()
        lm.config = replace(lm.config, particle_bytes=4 * 64 * 24)  # a few windows' particles per run
        watch = None if on_bytes is None else (lambda n: on_bytes(n, lm.stats.forwards))
        return score_documents(lm, docs, config, on_bytes=watch)

    seen: list[tuple[int, int]] = []  # (bytes, the LM's forwards so far)
    watched = run(lambda n, forwards: seen.append((n, forwards)))
    plain = run()
    assert watched[0].windows > 5 and len(seen) == watched[0].windows
    assert all(n > 0 for n, _ in seen) and sum(n for n, _ in seen) == docs[0].n_bytes
    assert seen[0][1] < seen[-1][1]  # reported while the particles run, not all at the end
    assert [s.to_record() for s in watched] == [s.to_record() for s in plain]  # figures, floors, forwards, extra
    assert "is_estimate" in watched[0].extra and watched[0].lower is not None
