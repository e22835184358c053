"""Perplexity on Ray actors (a local Ray with 2 CPUs): the records of a single-process run, a lost worker's batch
dealt again, a SIGKILLed driver resumed (issue 37, item 5).

Toy bigram LMs, whose figures do not depend on the batch, for the exact comparisons; one slow test runs two
SmolLM2 actors through ``ppl-tok perplexity --ray`` and checks the stated tolerance.
"""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'ppl-tok[ray]'")

from conftest import ROOT  # noqa: E402

from ppl_tok.common.distributed import DistributedError  # noqa: E402
from ppl_tok.perplexity import ScoringConfig, read_corpus  # noqa: E402
from ppl_tok.perplexity.corpus import CorpusError, corpus_from_texts  # noqa: E402
from ppl_tok.perplexity.distributed import TOLERANCE, run_perplexity_ray  # noqa: E402
from ppl_tok.perplexity.run import run_perplexity  # noqa: E402
from ppl_tok.perplexity.store import PerplexityStore  # noqa: E402
from ppl_tok.common.jsonl_store import read_json_lines  # noqa: E402
from ppl_tok.strings.beam import StringSearchConfig  # noqa: E402
from qa_toy import toy_lm  # noqa: E402
from sigkill import CrashOnceLoader, killed_twice_then_finished, ray_driver  # noqa: E402

CONFIG = ScoringConfig("beam", search=StringSearchConfig(beam=16))
WORDS = ["ab", "ba", "cd", "de", "abc", "gh", "a", "efg", "hh", "cab"]


def _corpus_file(tmp_path, n=12):
    path = tmp_path / "corpus.jsonl"
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"text": " ".join(WORDS[(i + k) % len(WORDS)] for k in range(3 + i % 4))}) + "\n")
    return path


def _records(folder):
    return sorted(PerplexityStore.read_records(folder / PerplexityStore.records_file), key=lambda r: r["index"])


@pytest.fixture
def corpus(tmp_path):
    return read_corpus(_corpus_file(tmp_path), field="text")


@pytest.fixture
def single(corpus, tmp_path):
    run_perplexity(toy_lm(), corpus, CONFIG, out=tmp_path / "single", batch_docs=3, field="text", progress=False)
    return tmp_path / "single"


def test_two_actors_store_the_single_process_records(local_ray, corpus, single, tmp_path):
    out = tmp_path / "ray"
    scores = run_perplexity_ray(toy_lm, corpus, CONFIG, out=out, workers=2, batch_docs=2, field="text",
                                progress=False)
    assert _records(out) == _records(single)
    assert [s.to_record() for s in scores] == _records(single)
    assert PerplexityStore.read_settings(out) == PerplexityStore.read_settings(single)  # either resumes the other
    timing = read_json_lines(out / PerplexityStore.timing_file)
    assert sum(t["documents"] for t in timing) == len(corpus) and {t["worker"] for t in timing} <= {0, 1}
    # a finished folder deals nothing, on Ray or in one process
    run_perplexity_ray(toy_lm, corpus, CONFIG, out=out, workers=2, batch_docs=2, field="text", progress=False)
    again = run_perplexity(toy_lm(), corpus, CONFIG, out=out, field="text", progress=False)
    assert len(read_json_lines(out / PerplexityStore.timing_file)) == len(timing)
    assert [s.to_record() for s in again] == _records(single)


@pytest.mark.slow  # ~20 s: Ray worker start-up
def test_a_byte_the_actors_lm_cannot_cover_is_one_line(local_ray, tmp_path):
    with pytest.raises(CorpusError, match=r"no token of .* covers the byte 0x7a \(document 1"):
        run_perplexity_ray(toy_lm, corpus_from_texts(["ab", "az"]), CONFIG, out=tmp_path / "ray", workers=1,
                           progress=False)
    assert not (tmp_path / "ray").exists()  # refused before the folder is written


@pytest.mark.slow  # ~30 s: Ray worker start-up
def test_a_worker_killed_mid_batch_is_replaced_and_its_batch_dealt_again(local_ray, corpus, single, tmp_path):
    marker = tmp_path / "crashed"
    run_perplexity_ray(CrashOnceLoader(str(marker), method="_prefill"), corpus, CONFIG, out=tmp_path / "ray",
                       workers=2, batch_docs=2, field="text", progress=False)
    assert marker.exists()  # one worker did die mid-batch
    assert _records(tmp_path / "ray") == _records(single)  # read_records also rejects a repeated record


@pytest.mark.slow  # ~30 s: Ray worker start-up
def test_a_worker_that_keeps_dying_stops_the_run_and_the_rerun_finishes(local_ray, corpus, single, tmp_path):
    with pytest.raises(DistributedError, match="lost to a dead worker 2 times.*run again to resume"):
        run_perplexity_ray(CrashOnceLoader(str(tmp_path / "m"), always=True, method="_prefill"), corpus, CONFIG,
                           out=tmp_path / "ray", workers=1, batch_docs=4, field="text", progress=False, max_retries=1)
    run_perplexity_ray(toy_lm, corpus, CONFIG, out=tmp_path / "ray", workers=2, batch_docs=4, field="text",
                       progress=False)
    assert _records(tmp_path / "ray") == _records(single)


DRIVER = """
from ppl_tok.perplexity import ScoringConfig, read_corpus
from ppl_tok.perplexity.distributed import run_perplexity_ray
from ppl_tok.strings.beam import StringSearchConfig
from qa_toy import toy_lm
run_perplexity_ray(toy_lm, read_corpus({corpus!r}, field="text"),
                   ScoringConfig("beam", search=StringSearchConfig(beam=16)), out={out!r}, workers=2, batch_docs=1,
                   field="text", progress=False)
"""


@pytest.mark.slow  # ~1-2 min: three drivers, each starting two actors
def test_a_driver_sigkilled_mid_run_resumes_to_the_uninterrupted_records(local_ray, tmp_path):
    corpus_path = _corpus_file(tmp_path, 40)
    ref = tmp_path / "ref"
    run_perplexity(toy_lm(), read_corpus(corpus_path, field="text"), CONFIG, out=ref, batch_docs=1, field="text",
                   progress=False)
    out = tmp_path / "run"
    script = tmp_path / "driver.py"
    script.write_text(ray_driver(DRIVER.format(corpus=str(corpus_path), out=str(out)), ROOT,
                                 ray.get_runtime_context().gcs_address))
    records = out / PerplexityStore.records_file
    killed_twice_then_finished(script, records, len(_records(ref)))
    assert _records(out) == _records(ref)


def test_ray_needs_out_and_workers_needs_ray(tmp_path, capsys):
    from ppl_tok.cli.main import main

    doc = tmp_path / "doc.txt"
    doc.write_text("ab ba\n")
    assert main(["perplexity", str(doc), "--ray"]) == 2
    assert "--ray needs --out" in capsys.readouterr().err
    assert main(["perplexity", str(doc), "--workers", "2", "--out", str(tmp_path / "run")]) == 2
    assert "--workers needs --ray" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # ~1 min: two SmolLM2 actors
@pytest.mark.parametrize("scoring", ["canonical", "beam"])
def test_two_smollm2_actors_agree_with_one_process_within_the_tolerance(local_ray, tmp_path, capsys, scoring):
    """``ppl-tok perplexity --ray --workers 2`` on 6 short paragraphs: each document's figures within
    :data:`TOLERANCE` nats of a single-process run's (batches of 4 documents there, of 1 on Ray)."""
    from ppl_tok.cli.main import main

    text = tmp_path / "doc.txt"
    text.write_text("\n\n".join(["The cat sat on the mat.", "Tokenization is a probabilistic program.",
                                 "Language models read bytes, not words.", "A short one.",
                                 "Perplexity over strings sums every tokenization.", "It rained."]) + "\n")
    args = ["perplexity", str(text), "--split", "paragraphs", "--scoring", scoring, "--json",
            *(["--beam", "4"] if scoring == "beam" else [])]  # the beam's flag is refused where no beam runs
    assert main([*args, "--out", str(tmp_path / "single"), "--batch-size", "4"]) == 0
    assert main([*args, "--out", str(tmp_path / "ray"), "--batch-size", "1", "--ray", "--workers", "2"]) == 0
    capsys.readouterr()
    assert {t["worker"] for t in read_json_lines(tmp_path / "ray" / PerplexityStore.timing_file)} == {0, 1}
    single, dist = _records(tmp_path / "single"), _records(tmp_path / "ray")
    assert [r["index"] for r in dist] == [r["index"] for r in single] == list(range(6))
    for a, b in zip(single, dist):
        assert a.keys() == b.keys()
        for key in ("log_likelihood", "canonical", "lower", "upper"):
            if key in a:
                assert b[key] == pytest.approx(a[key], abs=TOLERANCE), (key, a, b)
        assert (a["n_tokens"], a["windows"]) == (b["n_tokens"], b["windows"])
