"""The questions of a QA study: a tuning split and a disjoint test split.

* OpenBookQA: ``dev.jsonl`` tunes, ``test.jsonl`` tests (file order).
* SocialIQA (``dev.jsonl``) and HellaSwag (``hellaswag_val.jsonl[.gz]``): the
  rows are shuffled with a seeded ``random.Random(seed)``; the first half of
  the permutation is the tuning pool and the second half the test pool.
* A generic multiple-choice JSON Lines file
  (:func:`ppl_tok.datasets.read_multiple_choice`) is the test split on its own;
  ``tune=`` adds a second file as the tuning split.

``limit`` keeps the first ``limit`` questions of each pool, so a larger limit
only adds questions: the first 500 of a 1000-question run are the 500 of a
500-question run. The paper shuffled with Hugging Face ``datasets``
(``shuffle(seed=101)``), whose permutation is not reproduced here: the same
seed draws a different (equally random) subset.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path

from ppl_tok.datasets import (
    TASKS,
    DatasetError,
    Question,
    data_file,
    labels_file,
    read_hellaswag,
    read_multiple_choice,
    read_openbookqa,
    read_socialiqa,
)

#: the built-in datasets (:data:`ppl_tok.datasets.TASKS`)
DATASETS = TASKS
SPLITS = ("tune", "test")
SHUFFLE_SEED = 101


@dataclass(frozen=True)
class Study:
    """The questions of a study by split (``"tune"``, ``"test"``) and the files they came from.

    ``files`` maps each file read to its sha256, so a resumed run can check that
    its data did not change.
    """

    dataset: str
    splits: dict[str, list[Question]]
    files: dict[str, str] = field(default_factory=dict)

    def sizes(self) -> dict[str, int]:
        return {name: len(qs) for name, qs in self.splits.items()}


def sha256_of(path: Path) -> str:
    """The sha256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _one(data_dir: str | Path | None, dataset: str, split: str) -> Path:
    """The data file of ``dataset``'s ``split`` (:func:`ppl_tok.datasets.data_file`), or a :class:`DatasetError`."""
    if data_dir is None:
        raise DatasetError(f"--data-dir is needed for the built-in dataset {dataset!r}")
    path = data_file(dataset, split, data_dir)
    if not path.is_file():
        raise DatasetError(f"no {dataset} file {path.name!r} in {path.parent}")
    return path


def _shuffled_halves(questions: list[Question], seed: int) -> tuple[list[Question], list[Question]]:
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    half = len(order) // 2
    return [questions[i] for i in order[:half]], [questions[i] for i in order[half:]]


def _check_unique(split: str, questions: list[Question]) -> None:
    seen: dict[str, int] = {}
    for i, q in enumerate(questions):
        if q.id in seen:
            raise DatasetError(f"{split} split: question id {q.id!r} appears at positions {seen[q.id]} and {i}")
        seen[q.id] = i


def load_study(dataset: str, data_dir: str | Path | None = None, *, tune: str | Path | None = None,
               limit: int | None = None, seed: int = SHUFFLE_SEED) -> Study:
    """The tuning and test questions of ``dataset`` (a built-in name or a JSON Lines path).

    :param data_dir: a folder laid out like :data:`ppl_tok.datasets.DATA_ROOT` (or the dataset's own folder).
    :param tune: a JSON Lines file of tuning questions (generic datasets only).
    :param limit: at most this many questions per split.
    :param seed: the shuffle seed of SocialIQA and HellaSwag.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    files: list[Path] = []
    if dataset in DATASETS:
        if tune is not None:
            raise ValueError(f"--tune is for a JSON Lines dataset; {dataset} has its own tuning split")
        if dataset == "openbookqa":
            files = [_one(data_dir, dataset, "dev"), _one(data_dir, dataset, "test")]
            tune_qs, test_qs = read_openbookqa(files[0]), read_openbookqa(files[1])
        elif dataset == "socialiqa":
            files = [_one(data_dir, dataset, "dev")]
            if not labels_file(files[0]).is_file():
                raise DatasetError(f"no {dataset} file {labels_file(files[0]).name!r} in {files[0].parent}")
            files.append(labels_file(files[0]))
            tune_qs, test_qs = _shuffled_halves(read_socialiqa(files[0]), seed)
        else:
            files = [_one(data_dir, dataset, "val")]
            tune_qs, test_qs = _shuffled_halves(read_hellaswag(files[0]), seed)
        splits = {"tune": tune_qs, "test": test_qs}
    else:
        path = Path(dataset)
        if not path.is_file():
            raise DatasetError(f"{dataset!r} is neither one of {DATASETS} nor a JSON Lines file")
        files = [path]
        splits = {"test": read_multiple_choice(path)}
        if tune is not None:
            files.append(Path(tune))
            splits = {"tune": read_multiple_choice(tune), **splits}
    if limit is not None:
        splits = {name: qs[:limit] for name, qs in splits.items()}
    for name, qs in splits.items():
        if not qs:
            raise DatasetError(f"the {name} split of {dataset} has no questions "
                               f"(from {', '.join(str(p) for p in files)})")
        _check_unique(name, qs)
    name = dataset if dataset in DATASETS else Path(dataset).name
    return Study(name, splits, {str(p): sha256_of(p) for p in files})
