"""Device and dtype names (ppl_tok.lm.device): parsed once, errors naming the argument."""

import pytest
import torch

from ppl_tok.lm.device import dtype_name, parse_device, resolve_device, resolve_dtype, to_device


def test_parse_device_checks_only_the_name():
    assert parse_device("cuda:3") == torch.device("cuda", 3)  # need not exist here
    assert parse_device(torch.device("cpu")) == torch.device("cpu")
    for bad in ("gpu0", "cuda:x", 3.5):
        with pytest.raises(ValueError, match=f"^unknown device {bad!r}: expected e.g. 'cpu', 'cuda', 'cuda:0' or 'mps'$"):
            parse_device(bad)


def test_resolve_device_checks_the_machine():
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="^device 'cuda:1' is not available: torch finds no CUDA GPU"):
            resolve_device("cuda:1")
    else:
        with pytest.raises(ValueError, match=f"this machine has {torch.cuda.device_count()} CUDA device"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")
    with pytest.raises(ValueError, match="^device 'meta' is not supported: use 'cpu', 'cuda' or 'mps'$"):
        resolve_device("meta")


def test_resolve_dtype_names_and_dtypes():
    assert resolve_dtype("float32") is torch.float32 and resolve_dtype(torch.bfloat16) is torch.bfloat16
    assert dtype_name(torch.float16) == "float16"
    with pytest.raises(ValueError, match=r"^unknown dtype 'fp16': expected one of \('float32', 'bfloat16', 'float16'\)"):
        resolve_dtype("fp16")
    with pytest.raises(ValueError, match="^dtype torch.int8 is not one of"):
        resolve_dtype(torch.int8)


def test_to_device_on_the_cpu_is_the_tensor_itself():
    t = torch.arange(3)
    assert to_device(t, torch.device("cpu")) is t
