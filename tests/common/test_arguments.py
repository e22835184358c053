"""Argument types of the command line (ppl_tok.common.arguments): ranges, bad values, output paths."""

import argparse
import math

import pytest

from ppl_tok.common.arguments import POSITIVE, SEED, integer, output_file, output_folder, positive, positive_or_inf


def test_integer_ranges():
    assert integer(0)("0") == 0 and integer(2, 5)("5") == 5 and POSITIVE("7") == 7 and SEED(str(2**32 - 1)) == 2**32 - 1
    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected an integer >= 1, got 0$"):
        POSITIVE("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected an integer in 2\.\.5, got 6$"):
        integer(2, 5)("6")
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected an integer in 0\.\.4294967295, got 4294967296"):
        SEED(str(2**32))
    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected an integer, got '1\.5'$"):
        POSITIVE("1.5")


def test_positive_numbers():
    assert positive("0.25") == 0.25 and positive("1e3") == 1000.0
    for bad in ("0", "-1", "nan", "inf", "-inf"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"^expected a finite number > 0, got '{bad}'$"):
            positive(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="^expected a number, got 'x'$"):
        positive("x")
    assert math.isfinite(positive("1e-300"))


def test_argparse_names_the_type_in_its_message():
    p = argparse.ArgumentParser(exit_on_error=False)
    p.add_argument("--n", type=POSITIVE)
    with pytest.raises(argparse.ArgumentError, match="argument --n: expected an integer >= 1, got -2"):
        p.parse_args(["--n", "-2"])


def test_output_file(tmp_path):
    assert output_file(str(tmp_path / "out.json")) == str(tmp_path / "out.json") and output_file("-") == "-"
    with pytest.raises(argparse.ArgumentTypeError, match="^expected a file name, got ''$"):
        output_file("")
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{tmp_path} is a folder, not a file$"):
        output_file(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match=f"the folder {tmp_path / 'none'} does not exist"):
        output_file(str(tmp_path / "none" / "out.json"))


def test_output_folder(tmp_path):
    assert output_folder(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"
    (tmp_path / "f").write_text("x")
    with pytest.raises(argparse.ArgumentTypeError, match="use . for the current folder"):
        output_folder("")
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{tmp_path / 'f'} is a file, not a folder$"):
        output_folder(str(tmp_path / "f"))
    with pytest.raises(argparse.ArgumentTypeError, match=f"cannot create {tmp_path / 'f' / 'x'}: {tmp_path / 'f'} is a file"):
        output_folder(str(tmp_path / "f" / "x"))


def test_positive_or_inf_takes_inf_but_not_zero_or_nan():
    assert positive_or_inf("inf") == math.inf and positive_or_inf("12") == 12.0
    for bad in ("0", "-1", "nan", "-inf"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"^expected a number > 0 \\(inf: none\\), got '{bad}'$"):
            positive_or_inf(bad)
