"""Running ``ppl-tok`` in-process in tests: ``run(capsys, *argv)`` (``run(capsys, "benchmarks", ...)`` runs
``python -m benchmarks ...``, the benchmarks beside the package) and the strict JSON reader."""

import json

from ppl_tok.cli.main import main


def run(capsys, *argv):
    if argv and argv[0] == "benchmarks":
        from benchmarks.__main__ import build_parser

        code = main(list(argv[1:]), build_parser())
    else:
        code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def strict_json(out):
    def reject(name):
        raise ValueError(f"not RFC 8259 JSON: {name}")

    return json.loads(out, parse_constant=reject)
