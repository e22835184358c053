"""Tests of ppl_tok/perplexity/, one file per module; the documents several of them score."""

from pathlib import Path

#: the test folder (the sigkill harness and the helper modules live there)
TESTS = Path(__file__).resolve().parents[1]
#: documents over the toy vocabulary of qa_toy (spaces and letters a-h)
DOCS = [" ab cd", "abc de fgh", " a b c abc", "hgfe dcba ab", "ba ab cd ef gh a"]
