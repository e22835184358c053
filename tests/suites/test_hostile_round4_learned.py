"""Issue 56, item 1 (hostile round four): a collapsed learned proposal is flagged on the command line, in the text and
in ``--json``, never printed as a perfect estimate; on the toy LM, against its exact marginal."""

import json

from cli_run import run


def test_marginal_flags_a_learned_file_whose_draws_are_one_tokenization(capsys, tmp_path, monkeypatch):
    """The issue's reproduction: a proposal file with weights (-50, 0, 0, 0), then `marginal --proposal learned`."""
    import ppl_tok.cli.common
    from ppl_tok.proposals import LearnedProposal
    from toys import EXACT, LM, TEXT

    monkeypatch.setattr(ppl_tok.cli.common, "load_lm", lambda *a, **k: LM)
    path = tmp_path / "P.pt"
    LearnedProposal([-50.0, 0.0, 0.0, 0.0]).save(path)
    argv = ("marginal", TEXT, "--samples", "16", "--proposal", "learned", "--proposal-file", str(path))
    code, printed, _ = run(capsys, *argv, "--json")
    data = json.loads(printed)
    assert code == 0 and data["distinct_tokenizations"] == 1 and abs(data["ess"] - 16.0) < 1e-9
    assert abs(data["log_marginal"] - EXACT.log_marginal) > 0.1  # the collapsed estimate is off ...
    assert any("all 16 draws are one tokenization" in w for w in data["warnings"])  # ... and says it cannot tell
    code, printed, _ = run(capsys, *argv)
    assert code == 0 and f"distinct tokenizations:  1 of the {EXACT.count} drawn" in printed
    assert "WARNING: all 16 draws are one tokenization" in printed
