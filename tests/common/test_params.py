"""The parameter adapter (ppl_tok.common.params): flags, refusals, --model_args strings, stored settings and the
resume check, the reference table, all derived from one frozen dataclass."""

import argparse
import contextlib
import io
from dataclasses import dataclass, field

import pytest

from ppl_tok.common import params as P
from ppl_tok.common.arguments import integer, positive
from ppl_tok.common.params import Params, param


@dataclass(frozen=True)
class Beamish(Params):
    beam: int = param(8, "hypotheses kept per offset", flag="--beam", type=integer(1), limit="beam")
    prune: float = param(1e-6, "drop below this share of the best", flag="--prune", type=positive)
    exhaustive: bool = param(False, "run every kept prefix", flag="--exhaustive")
    budget: int | None = param(None, "forwards at most", flag="--search-budget", type=integer(1),
                               aliases=("--budget",))


@dataclass(frozen=True)
class Sampled(Params):
    num_samples: int = param(64, "importance particles", flag="--samples", type=integer(1))
    seed: int = param(0, "the particles' seed", flag="--seed", type=integer(0))
    mode: str = param("fast", "how", flag="--mode", choices=("fast", "slow"))
    hidden: float = param(0.5, "a Python-only knob", type=positive)


@dataclass(frozen=True)
class Fewer(Params):
    num_samples: int = param(8, "importance particles", flag="--samples", type=integer(1))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_samples > 100:
            raise ValueError(f"num_samples (--samples): at most 100, got {self.num_samples}")


OPS = {"beam": Beamish, "rest": Sampled, "few": Fewer}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    p.add_argument("--window", type=int)
    P.add_flags(p, OPS, "--scoring")
    return p


# ------------------------------------------------------------------ declaring and checking
def test_defaults_and_the_specs_read_off_the_fields():
    b = Beamish()
    assert (b.beam, b.prune, b.exhaustive, b.budget) == (8, 1e-6, False, None)
    s = P.specs(Beamish)
    assert [x.name for x in s] == ["beam", "prune", "exhaustive", "budget"]
    assert s[0].flag == "--beam" and s[0].help == "hypotheses kept per offset" and s[3].aliases == ("--budget",)
    assert s[0].limit == "beam" and s[1].limit is None
    assert P.specs(b) == s


@pytest.mark.parametrize("kwargs, message", [
    ({"beam": 0}, r"^beam \(--beam\): expected an integer >= 1, got 0$"),
    ({"beam": 1.5}, r"^beam \(--beam\): expected an integer, got '1\.5'$"),
    ({"beam": True}, r"^beam \(--beam\): expected integer, got True$"),
    ({"beam": "8"}, r"^beam \(--beam\): expected integer, got '8'$"),
    ({"prune": float("nan")}, r"^prune \(--prune\): expected a finite number > 0, got 'nan'$"),
    ({"prune": -1.0}, r"^prune \(--prune\): expected a finite number > 0, got '-1\.0'$"),
    ({"exhaustive": 1}, r"^exhaustive \(--exhaustive\): expected True or False, got 1$"),
    ({"exhaustive": "yes"}, r"^exhaustive \(--exhaustive\): expected True or False, got 'yes'$"),
    ({"budget": 0}, r"^budget \(--search-budget\): expected an integer >= 1, got 0$"),
])
def test_a_bad_python_value_is_one_line_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Beamish(**kwargs)


def test_a_float_field_takes_an_int_as_the_float_and_none_only_where_the_default_is():
    assert Beamish(prune=1).prune == 1.0 and type(Beamish(prune=1).prune) is float
    assert Beamish(budget=None).budget is None and Beamish(budget=5).budget == 5
    with pytest.raises(ValueError, match=r"^beam \(--beam\): expected a value, got None$"):
        Beamish(beam=None)
    with pytest.raises(ValueError, match=r"^mode \(--mode\): expected one of fast, slow, got 'medium'$"):
        Sampled(mode="medium")
    with pytest.raises(ValueError, match=r"^hidden: expected a finite number > 0"):
        Sampled(hidden=0.0)  # a field without a flag is named alone
    with pytest.raises(ValueError, match=r"at most 100, got 101"):  # a subclass's own check runs after the fields'
        Fewer(num_samples=101)


def test_a_declaration_without_a_default_or_help_or_type_is_refused():
    @dataclass(frozen=True)
    class NoHelp:
        x: int = field(default=1)

    @dataclass(frozen=True)
    class NoDefault:
        x: int = field(metadata={"help": "x"})

    @dataclass(frozen=True)
    class NoType:
        x: int = param(1, "x", flag="--x")

    @dataclass(frozen=True)
    class Opaque(Params):  # no flag, no type: a Python value, taken as it is, never from text
        record: dict | None = param(None, "a record")

    assert Opaque({"a": [1]}).record == {"a": [1]} and P.settings(Opaque({"a": (1,)})) == {"record": {"a": [1]}}
    with pytest.raises(ValueError, match=r"^record: a Python value, not text \('x'\): give it in Python$"):
        P.from_values(Opaque, {"record": "x"})

    with pytest.raises(TypeError, match=r"NoHelp\.x: a parameter needs one line of help"):
        P.specs(NoHelp)
    with pytest.raises(TypeError, match=r"NoDefault\.x: a parameter needs a default"):
        P.specs(NoDefault)
    with pytest.raises(TypeError, match=r"NoType\.x: give the type that parses its text"):
        P.specs(NoType)
    with pytest.raises(TypeError, match="is not a dataclass"):
        P.specs(int)


# ------------------------------------------------------------------ (a) the command line
def test_flags_parse_into_each_operations_own_params_with_its_own_defaults():
    args = parser().parse_args(["--samples", "16", "--beam", "3", "--exhaustive", "--window", "9"])
    assert args.window == 9 and P.given(args) == {"num_samples": 16, "beam": 3, "exhaustive": True}
    assert P.from_args(Beamish, args) == Beamish(beam=3, exhaustive=True)
    assert P.from_args(Sampled, args) == Sampled(num_samples=16)
    none = parser().parse_args([])
    assert P.given(none) == {} and P.from_args(Fewer, none).num_samples == 8 and P.from_args(Sampled, none).num_samples == 64


def test_a_shared_flag_is_one_flag_whose_help_names_its_operations_and_their_defaults():
    text = parser().format_help()
    assert text.count("\n  --samples") == 1
    assert "importance particles (--scoring rest, few; default 64 (rest), 8 (few))" in " ".join(text.split())
    assert "hypotheses kept per offset (--scoring beam; default 8)" in " ".join(text.split())
    assert "--hidden" not in text  # no flag: Python and --model_args only


def test_a_bad_flag_value_is_a_usage_error_with_the_types_message():
    err = io.StringIO()
    p = argparse.ArgumentParser(prog="t")
    P.add_flags(p, OPS)
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        p.parse_args(["--beam", "0"])
    assert "argument --beam: expected an integer >= 1, got 0" in err.getvalue()


def test_an_old_flag_name_works_with_one_warning():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        args = parser().parse_args(["--budget", "40"])
    assert P.from_args(Beamish, args).budget == 40
    assert err.getvalue().strip() == "t: warning: --budget is deprecated and will be removed: use --search-budget"


def test_a_flag_of_another_operation_is_refused_naming_the_chosen_one_and_its_flags():
    args = parser().parse_args(["--samples", "8"])
    P.refuse_foreign(args, {"rest": Sampled}, OPS, "--scoring")  # rest reads it
    with pytest.raises(ValueError) as e:
        P.refuse_foreign(args, {"beam": Beamish}, OPS, "--scoring")
    assert str(e.value) == ("--samples would be ignored: --scoring beam does not read it (it takes --beam, "
                            "--exhaustive, --prune, --search-budget; --samples is for --scoring rest, few); leave "
                            "--samples out or choose one of those")
    assert "\n" not in str(e.value)

    @dataclass(frozen=True)
    class Bare(Params):
        pass

    with pytest.raises(ValueError, match=r"--scoring bare does not read it \(it takes no flags of its own"):
        P.refuse_foreign(args, {"bare": Bare}, {**OPS, "bare": Bare}, "--scoring")
    P.refuse_foreign(args, {"beam": Beamish, "few": Fewer}, OPS, "--scoring")  # several chosen: one reads it


def test_one_flag_for_two_fields_or_a_taken_flag_is_refused_when_added():
    @dataclass(frozen=True)
    class Clash(Params):
        beams: int = param(2, "other", flag="--beam", type=integer(1))

    with pytest.raises(ValueError, match=r"flag --beam is field beam of beam but field beams of clash"):
        P.add_flags(argparse.ArgumentParser(), {"beam": Beamish, "clash": Clash})
    p = argparse.ArgumentParser()
    p.add_argument("--seed")
    with pytest.raises(ValueError, match=r"flag --seed of rest's seed is already a flag of this command"):
        P.add_flags(p, {"rest": Sampled})


def test_flags_added_later_appear_when_parsed_or_shown_and_not_before():
    asked = []

    def operations():
        asked.append(1)
        return OPS

    p = argparse.ArgumentParser(prog="t")
    P.add_flags_later(p, operations, "--scoring")
    assert asked == []
    assert P.from_args(Sampled, p.parse_args(["--seed", "3"])).seed == 3 and asked == [1]
    assert "parameters of each scoring" in p.format_help() and asked == [1]  # added once
    q = argparse.ArgumentParser(prog="t")
    P.add_flags_later(q, operations, "--scoring")
    assert "--samples" in q.format_help()


# ------------------------------------------------------------------ (b) --model_args
def test_model_args_strings_parse_into_the_fields():
    assert P.from_values(Sampled, {"num_samples": "16", "mode": "slow", "hidden": "0.25"}) == \
        Sampled(num_samples=16, mode="slow", hidden=0.25)
    assert P.from_values(Beamish, {"exhaustive": "True", "budget": "none"}) == Beamish(exhaustive=True)
    assert P.from_values(Beamish, {"exhaustive": False, "beam": 4}) == Beamish(beam=4)  # lm-eval's typed values
    mine, rest = P.split_values(Sampled, {"num_samples": "2", "pretrained": "x"})
    assert mine == {"num_samples": "2"} and rest == {"pretrained": "x"}
    with pytest.raises(ValueError, match=r"^scoring rest takes no parameter beam \(its parameters: num_samples, seed, "
                                         r"mode, hidden\)$"):
        P.from_values(Sampled, {"beam": "3"}, "scoring rest")
    with pytest.raises(P.ParamValueError, match=r"^num_samples \(--samples\): expected an integer >= 1, got 0$") as e:
        P.from_values(Sampled, {"num_samples": "0"})
    assert (e.value.spec.name, e.value.value, e.value.reason) == ("num_samples", "0", "expected an integer >= 1, got 0")
    with pytest.raises(ValueError, match=r"^exhaustive \(--exhaustive\): expected true or false, got 'maybe'$"):
        P.from_values(Beamish, {"exhaustive": "maybe"})


# ------------------------------------------------------------------ (c) run folders
def test_settings_round_trip_and_a_resume_under_other_values_is_refused_naming_the_field():
    b = Beamish(beam=3, exhaustive=True)
    stored = P.settings(b)
    assert stored == {"beam": 3, "prune": 1e-6, "exhaustive": True, "budget": None}
    assert P.from_settings(Beamish, {**stored, "scoring": "beam", "window": 9}) == b  # the run's other settings
    P.check_resume(Beamish, stored, b, "run/")
    assert P.differences(Beamish, {k: v for k, v in stored.items() if k != "budget"}, b) == []  # added since: default
    with pytest.raises(ValueError) as e:
        P.check_resume(Beamish, stored, Beamish(beam=4), "run/")
    assert str(e.value) == ("run/ was written by a run with other settings; use another folder or the same settings. "
                            "Differences: beam (--beam): the folder has 3, this run has 4 (the folder's run: --beam 3); "
                            "exhaustive (--exhaustive): the folder has True, this run has False (the folder's run: "
                            "--exhaustive)")
    assert P.differences(Sampled, {"hidden": 0.25}, Sampled()) == ["hidden: the folder has 0.25, this run has 0.5"]


# ------------------------------------------------------------------ (d) the reference
def test_the_reference_table_lists_field_flag_default_and_help():
    assert P.markdown_table(Beamish).splitlines() == [
        "| field | flag | default | help |", "|---|---|---|---|",
        "| `beam` | `--beam` | `8` | hypotheses kept per offset |",
        "| `prune` | `--prune` | `1e-06` | drop below this share of the best |",
        "| `exhaustive` | `--exhaustive` | `False` | run every kept prefix |",
        "| `budget` | `--search-budget` | `None` | forwards at most |"]
    assert "| `hidden` | - | `0.5` | a Python-only knob |" in P.markdown_table(Sampled)


def test_the_adapter_imports_nothing_heavy():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import ppl_tok.common.params, sys; "
                          "print(sorted(m for m in ('torch', 'pyro', 'networkx', 'transformers') if m in sys.modules))"],
                         capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_flags_added_later_to_a_subcommand_parse_through_the_main_parser():
    main = argparse.ArgumentParser(prog="t")
    sub = main.add_subparsers(dest="command")
    p = sub.add_parser("score")
    P.add_flags_later(p, lambda: OPS, "--scoring")
    args = main.parse_args(["score", "--samples", "5"])
    assert args.command == "score" and P.from_args(Sampled, args).num_samples == 5


def test_a_foreign_flag_at_its_default_passes_and_shared_fields_are_left_to_the_command():
    P.refuse_foreign(parser().parse_args(["--beam", "8"]), {"rest": Sampled}, OPS, "--scoring")  # changes nothing
    with pytest.raises(ValueError, match="--samples would be ignored"):  # 64 is rest's default, not few's (8)
        P.refuse_foreign(parser().parse_args(["--samples", "64"]), {"beam": Beamish}, OPS, "--scoring")
    p = argparse.ArgumentParser(prog="t")
    p.add_argument("--seed", type=int, default=5)  # the command's own flag for a field every operation shares
    P.add_flags(p, OPS, "--scoring", shared=("seed",))
    args = p.parse_args(["--seed", "3", "--samples", "2"])
    assert args.seed == 3 and P.given(args) == {"num_samples": 2}
    assert P.default_of(Sampled, "num_samples") == 64 and P.default_of(Fewer, "num_samples") == 8
    with pytest.raises(KeyError):
        P.default_of(Sampled, "beam")
