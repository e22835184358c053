"""The public surface (issue 45): ``import ppl_tok`` names the entry points, ``ppl_tok.infer`` its estimators, and
neither imports ``transformers`` until a model is loaded."""

import subprocess
import sys

import ppl_tok
import ppl_tok.infer
import ppl_tok.lm


def test_every_exported_name_resolves():
    for module in (ppl_tok, ppl_tok.infer, ppl_tok.lm):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, f"{module.__name__}.__all__ names what it lacks: {missing}"


def test_the_top_level_names_the_pyro_program_the_estimators_and_the_lm_over_strings():
    for name in ("load_lm", "compile_mdd", "tokenization_model", "mdd_guide", "lookahead", "StratifiedGuide",
                 "exact_marginal", "marginal", "marginal_bounds", "most_likely", "smc_marginal", "string_marginal",
                 "string_conditional", "initial"):
        assert name in ppl_tok.__all__, name
    assert {"exact_marginal", "marginal", "marginals", "marginal_bounds", "most_likely", "smc_marginal",
            "tokenization_posterior", "ess", "psis_khat"} <= set(ppl_tok.infer.__all__)


def test_import_does_not_import_transformers_until_an_hf_model_is_named():
    code = ("import sys, ppl_tok, ppl_tok.infer, ppl_tok.strings, ppl_tok.lm\n"
            "assert 'transformers' not in sys.modules, sorted(m for m in sys.modules if m.startswith('transformers'))\n"
            "cls = ppl_tok.HFLanguageModel\n"
            "assert 'transformers' in sys.modules and cls is ppl_tok.lm.HFLanguageModel\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_an_unknown_attribute_is_an_attribute_error():
    for module in (ppl_tok, ppl_tok.lm):
        try:
            name = "no_such_name"
            getattr(module, name)
        except AttributeError as e:
            assert "no_such_name" in str(e)
        else:
            raise AssertionError(f"{module.__name__}.no_such_name resolved")


def test_load_lm_is_typed_as_a_language_model():
    import typing
    import ppl_tok.lm.base
    # the annotation names the class under TYPE_CHECKING only (importing the card list imports no torch)
    hints = typing.get_type_hints(ppl_tok.load_lm, localns=vars(ppl_tok.lm.base))
    assert hints["return"] is ppl_tok.LanguageModel


def test_load_lm_of_a_spec_naming_nothing_is_an_error_naming_it():
    try:
        ppl_tok.load_lm(ppl_tok.LMSpec("no-such-model-card-or-folder"))
    except ppl_tok.ModelNotFoundError as e:
        assert "no-such-model-card-or-folder" in str(e)
    else:
        raise AssertionError("load_lm of an unknown model did not refuse it")
