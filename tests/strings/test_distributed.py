"""Surprisal and the batch commands on Ray actors (a local Ray with 2 CPUs): the single-process rows and
records, a worker killed mid-batch, a driver SIGKILLed mid-run (issue 37, item 5)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'ppl-tok[ray]'")

from ppl_tok.strings.beam import StringSearchConfig  # noqa: E402
from ppl_tok.strings.surprisal import surprisals  # noqa: E402
from conftest import ROOT  # noqa: E402
from qa_toy import toy_lm  # noqa: E402
from sigkill import CrashOnceLoader, killed_twice_then_finished, ray_driver  # noqa: E402

TEXTS = ["ab ba cd", "abc de", "gh a b", "cab", "de ef gh ab", "a a a"]


@pytest.mark.slow  # ~20-45 s: Ray worker start-up
def test_two_actors_give_the_single_process_units(local_ray, tmp_path):
    """The surprisal task through the runner on Ray: each item's units equal ``surprisals`` of it alone; an item
    that fails is stored with its error, its batch-mate's units still stored."""
    from ppl_tok.strings.batch import Item, Options
    from ppl_tok.strings.distributed import MembersLoader, run_items_ray

    options = Options(context="ab", config=StringSearchConfig(beam=4))
    items = [Item(i, t) for i, t in enumerate(TEXTS + ["ab z"])]  # no token spells "z"
    run = run_items_ray("surprisal", MembersLoader((toy_lm,)), items, options, out=str(tmp_path / "ray"),
                        batch_size=2, workers=2)
    assert run.computed == len(items) and "unit 1 (' z'" in run.records[-1]["error"]
    lm = toy_lm()
    for record, text in zip(run.records, TEXTS):
        want = [u.to_dict() for u in surprisals(lm, text, context="ab", config=options.config)]
        for u, w in zip(record["units"], want, strict=True):  # walked in lockstep: equal up to float32 rounding
            assert {k: v for k, v in u.items() if not isinstance(v, float)} == \
                {k: v for k, v in w.items() if not isinstance(v, float)}
            assert [v for v in u.values() if isinstance(v, float)] == \
                pytest.approx([v for v in w.values() if isinstance(v, float)], abs=1e-9)


@pytest.mark.slow  # ~30 s: Ray worker start-up
def test_batch_commands_on_two_actors_store_the_single_process_records(local_ray, tmp_path):
    """``conditional --input --out --ray``'s driver: the records of run_items without Ray, in a folder either kind
    of run resumes (same settings); an item that cannot be answered is stored with its error."""
    from ppl_tok.strings.batch import Item, Members, Options, run_items
    from ppl_tok.strings.distributed import MembersLoader, run_items_ray

    items = [Item(i, p, t, f"items.jsonl:{i + 1}") for i, (p, t) in
             enumerate([("ab", " cd"), ("gh a", " b"), ("ab c", "de"), ("cab", " z"), ("de ef", " gh")])]
    options = Options(config=StringSearchConfig(beam=4))
    seen: list[int] = []
    run = run_items_ray("conditional", MembersLoader((toy_lm,)), items, options, out=str(tmp_path / "ray"),
                        batch_size=2, workers=2, on_records=lambda rs: seen.extend(r["index"] for r in rs))
    assert run.computed == len(items) and sorted(seen) == list(range(len(items)))
    assert "error" in run.records[3] and "0x7A" in run.records[3]["error"]  # no token spells "z"
    single = run_items("conditional", Members((toy_lm(),)), items, options, out=tmp_path / "one", batch_size=2)
    assert run.records == single.records
    again = run_items("conditional", Members((toy_lm(),)), items, options, out=tmp_path / "ray", batch_size=2)
    assert again.computed == 0 and again.records == single.records  # a single process resumes the Ray folder


def test_ray_needs_out(tmp_path, capsys):
    from ppl_tok.cli.main import main

    items = tmp_path / "items.txt"
    items.write_text("the cat\n")
    assert main(["surprisal", str(items), "--ray"]) == 2
    assert "--ray needs --out" in capsys.readouterr().err
    assert main(["surprisal", str(items), "--workers", "2", "--out", str(tmp_path / "rows")]) == 2
    assert "--workers needs --ray" in capsys.readouterr().err
    prompts = tmp_path / "items.jsonl"
    prompts.write_text('{"prompt": "the", "text": " cat"}\n')
    assert main(["conditional", "--input", str(prompts), "--ray"]) == 2
    assert "--ray needs --out" in capsys.readouterr().err
    assert main(["next", "--prompt", "the", "--ray"]) == 2
    assert "--ray runs the batches of --input FILE" in capsys.readouterr().err
    assert main(["next", "--input", str(prompts), "--out", str(tmp_path / "run"), "--workers", "2"]) == 2
    assert "--workers needs --ray" in capsys.readouterr().err


@pytest.mark.slow  # ~1 min: two SmolLM2 actors
def test_surprisal_on_two_smollm2_actors_prints_the_single_process_rows(local_ray, tmp_path, capsys):
    """``ppl-tok surprisal --ray --workers 2 --out``: the rows of a run without Ray, within 1e-4 bits."""
    import json

    from ppl_tok.cli.main import main

    items = tmp_path / "items.txt"
    items.write_text("The old man the boat.\nTime flies like an arrow.\nColourless green ideas sleep.\n")
    args = ["surprisal", str(items), "--format", "jsonl", "--beam", "4"]
    assert main(args) == 0
    single = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main([*args, "--out", str(tmp_path / "rows"), "--ray", "--workers", "2"]) == 0
    dist = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["item"], r["unit"], r["text"]) for r in dist] == [(r["item"], r["unit"], r["text"]) for r in single]
    for a, b in zip(single, dist):
        for key in ("surprisal", "canonical", "lower", "upper"):
            if isinstance(a[key], str):  # "Infinity": no upper bound
                assert b[key] == a[key]
            else:
                assert b[key] == pytest.approx(a[key], abs=1e-4), (key, a, b)


@pytest.mark.slow  # ~1 min: two SmolLM2 actors
def test_conditional_input_on_two_smollm2_actors_leaves_a_folder_a_single_process_resumes(local_ray, tmp_path,
                                                                                         capsys):
    """``ppl-tok conditional --input --out --ray --workers 2``: every item computed on the actors; the same
    command without Ray then reads them all back (the folder's settings are a single process's)."""
    import json

    from ppl_tok.cli.main import main

    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"prompt": p, "text": t}) + "\n" for p, t in
                             [("The cat sat on the", " mat"), ("Paris is the capital of", " France"),
                              ("Two plus two is", " four")]))
    args = ["conditional", "--input", str(items), "--out", str(tmp_path / "run"), "--beam", "2", "--json",
            "--batch-size", "2"]
    assert main([*args, "--ray", "--workers", "2"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["computed"], first["errors"], first["items"]) == (3, 0, 3)
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["computed"], again["stored_before"]) == (0, 3)


def _prompts(n: int):
    from ppl_tok.strings.batch import Item

    words = ["ab", "cd", "de", "ef", "gh", "abc", "ba", "cab"]
    return [Item(i, " ".join(words[(i + k) % len(words)] for k in range(3)), " " + words[(3 * i) % len(words)],
                 f"items.jsonl:{i + 1}") for i in range(n)]


@pytest.mark.slow  # ~30 s: Ray worker start-up
def test_a_batch_workers_death_mid_batch_deals_the_batch_again(local_ray, tmp_path):
    from ppl_tok.strings.batch import Members, Options, run_items
    from ppl_tok.strings.distributed import MembersLoader, run_items_ray

    items, options = _prompts(6), Options(config=StringSearchConfig(beam=4))
    marker = tmp_path / "crashed"
    run = run_items_ray("next", MembersLoader((CrashOnceLoader(str(marker), method="_prefill"),)), items, options,
                        out=str(tmp_path / "ray"), batch_size=2, workers=2)
    assert marker.exists()  # one worker did die mid-batch
    single = run_items("next", Members((toy_lm(),)), items, options, out=tmp_path / "one", batch_size=2)
    assert run.records == single.records


BATCH_DRIVER = """
import json
from ppl_tok.strings.batch import Item, Options
from ppl_tok.strings.beam import StringSearchConfig
from ppl_tok.strings.distributed import MembersLoader, run_items_ray
from qa_toy import toy_lm
items = [Item(**json.loads(line)) for line in open({items!r})]
run_items_ray("conditional", MembersLoader((toy_lm,)), items, Options(config=StringSearchConfig(beam=16)),
              out={out!r}, batch_size=1, workers=2)
"""


@pytest.mark.slow  # ~1-2 min: three drivers, each starting two actors
def test_a_batch_driver_sigkilled_mid_run_resumes_to_the_uninterrupted_records(local_ray, tmp_path):
    import dataclasses
    import json

    from ppl_tok.common.jsonl_store import read_json_lines
    from ppl_tok.strings.batch import Members, Options, StringsStore, run_items

    items = _prompts(40)
    ref = run_items("conditional", Members((toy_lm(),)), items, Options(config=StringSearchConfig(beam=16)),
                    out=tmp_path / "ref", batch_size=1)
    items_file = tmp_path / "items.jsonl"
    items_file.write_text("".join(json.dumps(dataclasses.asdict(it)) + "\n" for it in items))
    out = tmp_path / "run"
    script = tmp_path / "driver.py"
    script.write_text(ray_driver(BATCH_DRIVER.format(items=str(items_file), out=str(out)), ROOT,
                                 ray.get_runtime_context().gcs_address))
    records = out / StringsStore.records_file
    killed_twice_then_finished(script, records, len(ref.records))
    assert sorted(read_json_lines(records), key=lambda r: r["index"]) == ref.records
