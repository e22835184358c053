"""One default per parameter (issue 57): every scoring's parameters default alike in Python (``ScoringConfig``),
on the command line (``ppl-tok perplexity``, ``ppl-tok qa run``) and in lm-eval's model (``--model_args``), since
each default lives once, in the scoring's own parameters (:mod:`ppl_tok.common.params`)."""

import pytest

from ppl_tok.scorings.registry import DOCUMENT, PAIR, SCORINGS, ScoringConfig
from qa_toy import toy_lm


def _names():
    return [s.name for s in SCORINGS.values()]


@pytest.mark.parametrize("name", _names())
def test_python_the_command_line_and_lm_eval_agree_on_every_parameter(name, tmp_path):
    from ppl_tok.cli.main import build_parser
    from ppl_tok.cli.perplexity import scoring_config

    scoring = SCORINGS[name]
    python = scoring.params()  # the declaration's defaults
    for level in (DOCUMENT, PAIR):
        if level in scoring.levels:
            assert ScoringConfig(name, level=level).params == python, (name, level)
    if DOCUMENT in scoring.levels:
        args = build_parser().parse_args(["perplexity", str(tmp_path / "x.txt"), "--scoring", name])
        assert scoring_config(args).params == python, name
    if DOCUMENT in scoring.levels or PAIR in scoring.levels:
        pytest.importorskip("lm_eval")
        from ppl_tok.integrations.lm_eval import PPLTokLM

        model = PPLTokLM(lm=toy_lm(), scoring=name)
        configs = [c for c in (model.pair_config, model.document_config) if c is not None and c.scoring == name]
        assert configs and all(c.params == python for c in configs), name


def test_the_qa_study_reads_the_scorings_defaults(tmp_path):
    from ppl_tok.cli.main import build_parser
    from ppl_tok.common.params import default_of
    from ppl_tok.qa.run import study_settings
    from ppl_tok.qa.data import load_study
    from ppl_tok.scorings.canonical_rest import CanonicalPlusRestParams
    from ppl_tok.scorings.exact import ExactParams
    from ppl_tok.scorings.most_likely import MostLikelyParams
    from qa_toy import write_questions

    args = build_parser().parse_args(["qa", "run", "--dataset", "x.jsonl", "--out", str(tmp_path / "r")])
    assert args.samples == default_of(CanonicalPlusRestParams, "num_samples")
    assert args.seed == default_of(CanonicalPlusRestParams, "seed")
    assert (args.exact_tolerance, args.exact_budget) == (None, None)  # read from ExactParams when the run starts
    assert args.time_budget is None  # read from MostLikelyParams when the run starts
    study = load_study(str(write_questions(tmp_path / "t.jsonl", 2, seed=1)))
    settings = study_settings(study, model="toy")
    assert (settings["num_samples"], settings["seed"], settings["exact_tolerance"], settings["exact_budget"]) == (
        default_of(CanonicalPlusRestParams, "num_samples"), default_of(CanonicalPlusRestParams, "seed"),
        default_of(ExactParams, "exact_tolerance"), default_of(ExactParams, "exact_budget"))
    assert settings["most_likely_time"] == default_of(MostLikelyParams, "most_likely_time") == 10.0


def test_the_conditionals_event_has_one_default_in_python_the_command_line_and_lm_eval():
    """The conditional's event is declared once (``EventParams``, boundary): Python's three conditionals,
    ``ppl-tok conditional`` (one prompt, ``--input``, ``task conditional``), ``ppl-tok boundary``, the scoring and
    lm-eval's model read it there."""
    import inspect

    from ppl_tok.cli.main import build_parser
    from ppl_tok.cli.strings_batch import _options
    from ppl_tok.common.params import default_of
    from ppl_tok.scorings.conditional import ConditionalParams, conditional_scores
    from ppl_tok.strings.boundary import boundary_report
    from ppl_tok.strings.conditional import conditional_of, conditionals_many, string_conditional
    from ppl_tok.strings.conditional_event import DEFAULT_EVENT, EventParams
    from ppl_tok.strings.conditional_tree import conditionals_tree
    from ppl_tok.strings.tasks import string_task

    assert DEFAULT_EVENT == default_of(EventParams, "event") == "boundary"
    for f in (string_conditional, conditionals_many, conditionals_tree, conditional_of, conditional_scores,
              boundary_report):
        assert inspect.signature(f).parameters["event"].default == DEFAULT_EVENT, f.__name__
    assert ConditionalParams().event == ScoringConfig("conditional", level=PAIR).params.event == DEFAULT_EVENT
    task = string_task("conditional")
    parser = build_parser()
    for argv in (["conditional", "--prompt", "a", "b"], ["conditional", "--input", "x.jsonl"],
                 ["task", "conditional", "--prompt", "a", "--text", "b"]):
        assert _options(parser.parse_args(argv), task).params.event == DEFAULT_EVENT, argv
    assert parser.parse_args(["boundary", "x.jsonl"]).event == DEFAULT_EVENT
    pytest.importorskip("lm_eval")
    from ppl_tok.integrations.lm_eval import PPLTokLM

    model = PPLTokLM(lm=toy_lm(), scoring="conditional")
    assert model.event == model.pair_config.params.event == DEFAULT_EVENT
