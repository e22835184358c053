"""Multiple-choice QA data sets in their original file formats.

Each row becomes a :class:`Question` with the context and choices formatted as
in the paper's evaluation (lm-eval tasks): the answer is scored as the
continuation ``" " + choice`` of the context (:func:`continuation`).

* HellaSwag (``hellaswag_val.jsonl[.gz]``): ``activity_label: ctx_a Ctx_b``,
  WikiHow markup removed; gold ``label`` (0-3).
* SocialIQA (``dev.jsonl`` + ``dev-labels.lst``): ``"Q: {context} {question}\\nA:"``;
  labels are 1-based.
* OpenBookQA (``dev.jsonl``/``test.jsonl``): the question stem; gold ``answerKey``.

A malformed row raises :class:`DatasetError` naming the file and line.

The data folder's layout is held here once: :data:`DATA_ROOT` (the default
folder), :data:`DATA_FILES` (``<root>/<task>/<file>`` by task and split) and
:func:`data_file` (the path of one split).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ppl_tok.common.lines import split_lines

#: the data folder read by default (relative to the working directory: ``shared/data`` beside the checkout)
DATA_ROOT = "../shared/data"
#: the data shipped inside the package, laid out like :data:`DATA_ROOT`: OpenBookQA's dev and test splits
#: (``openbookqa/SOURCE.md`` says where they come from), so that an installed package runs the QA study and its
#: tutorial without a checkout
BUNDLED_DATA = Path(__file__).resolve().parent / "data"

#: the files of each task's splits inside ``<root>/<task>/``; where several names are given, the first that
#: exists is read (HellaSwag plain or gzipped)
DATA_FILES: dict[str, dict[str, tuple[str, ...]]] = {
    "hellaswag": {"val": ("hellaswag_val.jsonl", "hellaswag_val.jsonl.gz")},
    "socialiqa": {"dev": ("dev.jsonl",)},
    "openbookqa": {"dev": ("dev.jsonl",), "test": ("test.jsonl",)},
}
#: the built-in tasks
TASKS = tuple(DATA_FILES)


def data_file(task: str, split: str, root: str | Path = DATA_ROOT) -> Path:
    """The file of ``task``'s ``split`` under a data folder laid out like :data:`DATA_ROOT`: ``<root>/<task>/<file>``.

    ``root`` may also be the task's own folder (when it has no ``<task>/`` inside). Of several accepted file
    names (:data:`DATA_FILES`) the first that exists is returned; if none does, the first (for the caller's
    error message).
    """
    try:
        names = DATA_FILES[task][split]
    except KeyError:
        raise ValueError(f"no {split!r} split of {task!r}: the built-in splits are "
                         + ", ".join(f"{t} {s}" for t, splits in DATA_FILES.items() for s in splits)) from None
    root = Path(root)
    folders = [root / task] if (root / task).is_dir() else [root, root / task]
    for folder in folders:
        for name in names:
            if (folder / name).is_file():
                return folder / name
    return root / task / names[0]


def labels_file(path: str | Path) -> Path:
    """The labels file of a SocialIQA data file: ``dev-labels.lst`` beside ``dev.jsonl``."""
    path = Path(path)
    return path.with_name(path.stem + "-labels.lst")


class DatasetError(ValueError):
    """A data file that cannot be read as the task it claims to be."""


@dataclass(frozen=True)
class Question:
    """One multiple-choice item: ``choices[label]`` is the gold continuation."""

    task: str
    id: str
    context: str
    choices: tuple[str, ...]
    label: int


def _hellaswag_clean(text: str) -> str:
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def _open(path: Path) -> Iterator[tuple[int, dict]]:
    opener = gzip.open if path.suffix == ".gz" else open
    rows = 0
    try:
        with opener(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8-sig" if n == 1 else "utf-8")  # a byte order mark is accepted
                except UnicodeDecodeError as err:
                    raise DatasetError(f"{path}:{n}: not UTF-8 text ({err.reason} at byte {err.start} of the "
                                       "line); re-encode the file as UTF-8") from err
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise DatasetError(f"{path}:{n}: not valid JSON ({err})") from err
                if not isinstance(row, dict):
                    raise DatasetError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
                _check_unicode(row, path, n)
                rows += 1
                yield n, row
    except (OSError, EOFError) as err:
        raise DatasetError(f"cannot read {path}: {err}") from err
    if not rows:
        raise DatasetError(f"{path}: no rows (the file is empty or holds only blank lines)")


def _check_unicode(row: dict, path: Path, n: int) -> None:
    """A :class:`DatasetError` if a string of ``row`` holds a lone surrogate (a ``\\ud800`` escape is not text)."""
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(err.object[err.start])
        raise DatasetError(f"{path}:{n}: a string holds the lone surrogate U+{code:04X} (an escape such as "
                           f"\\u{code:04x} that is half of a pair), which is not text; fix the line") from None


def _field(row: dict, key: str, path: Path, n: int, kind: type = str):
    if key not in row:
        raise DatasetError(f"{path}:{n}: missing field {key!r}")
    if not isinstance(row[key], kind) or (kind is int and isinstance(row[key], bool)):
        raise DatasetError(f"{path}:{n}: field {key!r} should be {kind.__name__}, got {row[key]!r}")
    return row[key]


def _strings(values: list, what: str, path: Path, n: int) -> list[str]:
    """``values`` if every one is a string, else a :class:`DatasetError` naming the first that is not."""
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise DatasetError(f"{path}:{n}: {what} {i} should be a string, got {v!r}")
    return values


def read_hellaswag(path: Path) -> list[Question]:
    out = []
    for n, row in _open(path):
        endings = _strings(_field(row, "endings", path, n, list), "ending", path, n)
        label = _field(row, "label", path, n, int)
        if len(endings) < 2 or not 0 <= label < len(endings):
            raise DatasetError(f"{path}:{n}: label {label} does not index {len(endings)} endings")
        ctx = _field(row, "activity_label", path, n) + ": " + _field(row, "ctx_a", path, n) + " " + \
            _field(row, "ctx_b", path, n).capitalize()
        # the id is the line number: `ind` repeats in the validation file (433 values, e.g. 10606 twice)
        out.append(Question("hellaswag", str(n), _hellaswag_clean(ctx),
                            tuple(_hellaswag_clean(e) for e in endings), label))
    return out


def read_socialiqa(path: Path) -> list[Question]:
    labels_path = labels_file(path)
    if not labels_path.is_file():
        raise DatasetError(f"{path}: the labels file {labels_path.name} is missing beside it")
    try:
        lines = split_lines(labels_path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise DatasetError(f"{labels_path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    labels = [(k, line.strip()) for k, line in enumerate(lines, 1) if line.strip()]
    rows = list(_open(path))
    if len(rows) != len(labels):
        raise DatasetError(f"{path} has {len(rows)} rows but {labels_path.name} has {len(labels)} labels")
    out = []
    for (n, row), (k, lab) in zip(rows, labels):
        if lab not in ("1", "2", "3"):
            raise DatasetError(f"{labels_path}:{k}: label {lab!r} (for {path.name} line {n}) is not 1, 2 or 3")
        ctx = f"Q: {_field(row, 'context', path, n)} {_field(row, 'question', path, n)}\nA:"
        choices = tuple(_field(row, k, path, n) for k in ("answerA", "answerB", "answerC"))
        out.append(Question("socialiqa", str(n), ctx, choices, int(lab) - 1))
    return out


def read_openbookqa(path: Path) -> list[Question]:
    out = []
    for n, row in _open(path):
        q = _field(row, "question", path, n, dict)
        choices = _field(q, "choices", path, n, list)
        try:
            texts = tuple(_strings([c["text"] for c in choices], "choice text", path, n))
            labels = _strings([c["label"] for c in choices], "choice label", path, n)
        except (KeyError, TypeError) as err:
            raise DatasetError(f"{path}:{n}: malformed choices ({err})") from err
        key = _field(row, "answerKey", path, n)
        if key not in labels:
            raise DatasetError(f"{path}:{n}: answerKey {key!r} is not one of {labels}")
        out.append(Question("openbookqa", str(row.get("id", n)), _field(q, "stem", path, n), texts,
                            labels.index(key)))
    return out


def load_questions(path: str | Path) -> list[Question]:
    """Read a data file, recognising the task from its file name and fields."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"no data file at {path}")
    name = path.name.lower()
    if "hellaswag" in name:
        return read_hellaswag(path)
    if labels_file(path).is_file():
        return read_socialiqa(path)
    return read_openbookqa(path)


def find_data_files(root: str | Path) -> list[Path]:
    """The data files (:data:`DATA_FILES`) present under a folder laid out like :data:`DATA_ROOT`."""
    root = Path(root)
    files = [data_file(task, split, root) for task, splits in DATA_FILES.items() if (root / task).is_dir()
             for split in splits]
    files = [f for f in files if f.is_file()]
    if not files:
        raise DatasetError(f"no HellaSwag, SocialIQA or OpenBookQA files under {root}")
    return files


def continuation(choice: str) -> str:
    """The scored continuation of an answer: ``" " + choice`` (lm-eval's convention)."""
    return " " + choice


def texts_of(questions: list[Question]) -> Iterator[str]:
    """Every context and every continuation (:func:`continuation`) of the questions."""
    for q in questions:
        yield q.context
        for c in q.choices:
            yield continuation(c)


def read_multiple_choice(path: str | Path, task: str = "custom") -> list[Question]:
    """Read the generic multiple-choice JSON Lines format (users' own data).

    One object per line: ``context`` (str), ``choices`` (list of at least two
    str), ``label`` (int index into ``choices``) and an optional ``id`` (str or
    int; default: the line number). The answer ``choices[label]`` is scored as
    the continuation ``" " + choice`` of ``context``, as for the built-in tasks.
    A malformed row raises :class:`DatasetError` naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"no data file at {path}")
    out = []
    for n, row in _open(path):
        context = _field(row, "context", path, n)
        choices = _strings(_field(row, "choices", path, n, list), "choice", path, n)
        if len(choices) < 2 or not all(choices):
            raise DatasetError(f"{path}:{n}: 'choices' must be a list of at least two non-empty strings")
        label = _field(row, "label", path, n, int)
        if not 0 <= label < len(choices):
            raise DatasetError(f"{path}:{n}: label {label!r} does not index {len(choices)} choices")
        qid = row.get("id", n)
        if not isinstance(qid, (str, int)) or isinstance(qid, bool):
            raise DatasetError(f"{path}:{n}: field 'id' should be a string or an int, got {qid!r}")
        out.append(Question(task, str(qid), context, tuple(choices), label))
    return out
