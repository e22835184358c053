"""Running ``ppl-tok`` in-process in tests: ``run(capsys, *argv)`` and the strict JSON reader."""

import json

from ppl_tok.cli.main import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def strict_json(out):
    def reject(name):
        raise ValueError(f"not RFC 8259 JSON: {name}")

    return json.loads(out, parse_constant=reject)
