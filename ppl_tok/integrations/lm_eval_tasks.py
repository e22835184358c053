"""lm-eval tasks over ppl-tok's local data: the questions of ``ppl-tok qa run`` as lm-eval task files.

:func:`write_tasks` writes a task YAML and a JSON Lines file per split (``ppl-tok-lm-eval write-tasks``);
:func:`write_hf_tokenizer` a tokenizer folder for lm-eval's ``hf`` model that prepends the card's BOS.
Nothing here needs lm-eval itself (:mod:`ppl_tok.integrations.lm_eval` registers the model).
"""

from __future__ import annotations

import json
from pathlib import Path

from ppl_tok.common.arguments import POSITIVE, SEED, output_folder
from ppl_tok.datasets import DATA_ROOT, TASKS
from ppl_tok.qa.data import SHUFFLE_SEED

TASK_PREFIX = "ppltok_"


def _task_yaml(task: str, data_file: Path) -> str:
    config = {
        "task": task,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file.resolve())}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "context",
        "doc_to_choice": "choices",
        "doc_to_target": "label",
        "target_delimiter": " ",
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in ("acc", "acc_norm")],
        "metadata": {"version": 1.0},
    }
    return json.dumps(config, indent=2) + "\n"  # JSON is YAML


def write_tasks(dataset: str, out: str | Path, *, data_dir: str | Path | None = None, tune: str | Path | None = None,
                limit: int | None = None, shuffle_seed: int = SHUFFLE_SEED) -> list[str]:
    """Write lm-eval tasks holding exactly the questions of ``ppl-tok qa run`` with the same arguments.

    For each split of :func:`ppl_tok.qa.data.load_study` (``tune``, ``test``) it
    writes ``out/<task>.jsonl`` (one ``{"id", "split", "context", "choices",
    "label"}`` per question, in the study's order) and ``out/<task>.yaml``; the
    test split's task is ``ppltok_<name>``, the tuning split's
    ``ppltok_<name>_tune`` (``<name>``: the dataset, or the file stem). Use
    ``--include_path out``. Returns the task names.
    """
    from ppl_tok.qa.data import DATASETS, load_study

    study = load_study(dataset, data_dir, tune=tune, limit=limit, seed=shuffle_seed)
    name = dataset if dataset in DATASETS else Path(dataset).stem
    name = "".join(ch if ch.isalnum() else "_" for ch in name)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for split, questions in study.splits.items():
        task = TASK_PREFIX + name + ("" if split == "test" else f"_{split}")
        data_file = folder / f"{task}.jsonl"
        with open(data_file, "w", encoding="utf-8") as f:
            for q in questions:
                f.write(json.dumps({"id": q.id, "split": split, "context": q.context, "choices": list(q.choices),
                                    "label": q.label}) + "\n")
        (folder / f"{task}.yaml").write_text(_task_yaml(task, data_file), encoding="utf-8")
        names.append(task)
    return names


def _write_tasks_main(argv: list[str]) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="ppl-tok-lm-eval write-tasks",
                                description="Write lm-eval task YAML + JSON Lines holding the questions of "
                                            "`ppl-tok qa run` with the same arguments.")
    p.add_argument("--dataset", required=True, help=f"{', '.join(TASKS)} or a JSON Lines file")
    p.add_argument("--data-dir", type=Path,
                   help=f"folder holding {', '.join(t + '/' for t in TASKS)} (laid out like {DATA_ROOT})")
    p.add_argument("--tune", type=Path, help="JSON Lines tuning split (with a JSON Lines --dataset)")
    p.add_argument("--limit", type=POSITIVE, help="at most this many questions per split")
    p.add_argument("--shuffle-seed", type=SEED, default=SHUFFLE_SEED)
    p.add_argument("--out", type=output_folder, required=True, help="folder for the tasks (then --include_path OUT)")
    a = p.parse_args(argv)
    names = write_tasks(a.dataset, a.out, data_dir=a.data_dir, tune=a.tune, limit=a.limit,
                        shuffle_seed=a.shuffle_seed)
    print(f"wrote tasks {', '.join(names)} into {a.out}; use --include_path {a.out} --tasks {','.join(names)}")


def write_hf_tokenizer(model: str, out: str | Path) -> Path:
    """A tokenizer folder for lm-eval's ``hf`` model that prepends the card's BOS (e.g. id 0 for SmolLM2).

    Pass it as ``--model_args pretrained=FOLDER,tokenizer=OUT,add_bos_token=True,prefix_token_id=BOS``.
    """
    from transformers import AutoTokenizer

    from ppl_tok.lm.bos import default_bos
    from ppl_tok.lm.cards import _load_tokenizer

    tokenizer, card = _load_tokenizer(model)
    bos_id = default_bos(card, model, tokenizer)
    if bos_id is None:
        raise ValueError(f"{model}: no BOS id (neither a card, the tokenizer's pipeline nor its bos_token names one)")
    bos = tokenizer.convert_ids_to_tokens(int(bos_id))
    out = Path(out)
    tokenizer.save_pretrained(out)
    fixed = AutoTokenizer.from_pretrained(out, bos_token=bos, add_bos_token=True)
    fixed.save_pretrained(out)
    return out


__all__ = ["TASK_PREFIX", "write_hf_tokenizer", "write_tasks"]
