"""An append-only, crash-safe folder of JSON records: the mechanism under every resumable run of ppl-tok.

A store folder holds:

* a settings file (``run.json``): what the records depend on, written once,
  atomically (temporary file, ``fsync``, ``rename``, ``fsync`` of the folder), at
  the start. Opening the folder with other settings raises
  :class:`SettingsMismatchError` naming every differing setting. Settings named
  in :attr:`JsonlStore.growable` are lists that may grow (merged, never
  compared); those in :attr:`JsonlStore.informational` are recorded for the
  reader and not compared; :attr:`JsonlStore.defaults` are the values of
  settings added after the first folders were written (a folder that lacks one
  holds what it meant then). A folder that holds records but no settings file
  is refused (whose settings the records have is unknown), as is a lone file's
  records without its settings file: no run adopts another's records.
* a records file (one JSON object per line). Records are appended a batch at a
  time with one ``write``, ``flush`` and ``fsync``. A process killed at any
  point leaves at most one partial last line (no trailing newline):
  :meth:`JsonlStore.open` cuts it off, so that record is computed again. A
  malformed complete line, or the same key twice, is an error naming the file
  and line, never skipped; so is a record whose numbers are not what a run
  writes (NaN, an infinity, a log-probability above 0, a negative count: the
  kinds of :attr:`JsonlStore.fields`, checked by :func:`check_fields`).
* ``.lock``: an exclusive ``flock`` held by the process that has the folder
  open, so two runs never write one folder at once; the kernel releases it when
  that process ends, however it ends.
* an optional timing file (one JSON line per batch), kept apart so that the
  records of a resumed run equal those of an uninterrupted one; a torn last
  timing line is left out (only a batch's timing is lost, never a record).

Standard JSON only (``allow_nan=False``): a subclass encodes ``-inf`` and the
like itself (:func:`encode_log`), unless it sets :attr:`JsonlStore.allow_nan`
for a file format that has always held them.

A concrete store is a subclass naming its files and the key of a record
(:meth:`JsonlStore.key`); :class:`ppl_tok.qa.store.ScoreStore` and
:class:`ppl_tok.perplexity.store.PerplexityStore` are two.

A lone records file (a benchmark's ``--records``: no folder, no settings) is
opened with :meth:`JsonlStore.open_file`: the same torn-line repair, strict
reading and durable batches, the ``flock`` held on the file itself.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from ppl_tok.common.lines import split_lines
from ppl_tok.common.records import (FIELD_KINDS, SettingsMismatchError, StoreError, check_fields,  # noqa: F401
                                    damaged, decode_log, decode_logs, encode_log, encode_logs)

LOCK_FILE = ".lock"


#: the command-line flag of a stored setting, named in a refusal with the folder's value (how to resume it)
SETTING_FLAGS = {"beam": "--beam", "prune": "--prune", "budget": "--search-budget", "prefill": "--prefill",
                 "extend_threshold": "--extend-threshold", "boundary_threshold": "--boundary-threshold",
                 "rejoin_threshold": "--rejoin-threshold", "exhaustive": "--exhaustive", "scoring": "--scoring", "window": "--window",
                 "num_samples": "--samples", "seed": "--seed", "model": "--model", "dtype": "--dtype",
                 "bos_id": "--bos-id", "backend": "--backend", "units": "--units", "context": "--context",
                 "final": "--final", "field": "--field", "split": "--split", "keep_punctuation": "--keep-punctuation",
                 "exact_budget": "--exact-budget", "exact_tolerance": "--exact-tolerance",
                 "event": "--event"}


def _difference(name: str, setting: str, old: Any, new: Any) -> str:
    """``name: folder has OLD, this run has NEW`` and, for a setting with a flag, the flag that resumes the folder."""
    line = f"{name}: folder has {old!r}, this run has {new!r}"
    flag = SETTING_FLAGS.get(setting)
    if flag is None:
        return line
    resume = f"without {flag}" if old in (None, False) else flag if old is True else f"{flag} {old}"
    return f"{line} (the folder's run: {resume})"


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in ``folder`` durable (a no-op where folders have no descriptors)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` so that a kill leaves either the old or the new file, whole."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def lock_file(path: Path, what: Path | None = None) -> int:
    """An exclusive ``flock`` on ``path`` (created if missing; its descriptor), or a :class:`StoreError`.

    ``what``: what the lock guards, for the message (default: ``path``).
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(f"{what or path} is being written by another run (it holds {path}); "
                         f"wait for it to finish or stop it first") from None
    return fd


def lock_folder(folder: Path) -> int:
    """An exclusive ``flock`` on the folder's lock file (its descriptor), or a :class:`StoreError`."""
    return lock_file(folder / LOCK_FILE, folder)


def repair(path: Path) -> int:
    """Cut off a partial last line (a write torn by a kill); return the bytes removed."""
    if not path.exists():
        return 0
    with open(path, "rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return len(data) - keep


def _holds_records(path: Path) -> bool:
    """Whether ``path`` holds any byte but whitespace (a records file a run wrote to)."""
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return True
    return False


def read_jsonl_records(path: str | Path, key: Callable[[dict[str, Any]], Hashable], what: str = "record",
                       validate: Callable[[Any, str], dict[str, Any]] | None = None,
                       unique: bool = True) -> Iterator[dict[str, Any]]:
    """The complete records of a records file; a malformed or repeated line is an error naming it.

    A partial last line (no newline) is not a record yet: a batch a running
    writer has not finished, or one torn by a kill (which :meth:`JsonlStore.open`
    cuts off). It is left out, so a run in progress can be read while it appends.
    ``key(record)`` raising ``KeyError``/``TypeError`` marks the line as not a ``what``;
    ``validate(record, "file:line")``, if given, checks a record first (raising a
    :class:`StoreError` that starts with the file and line). ``unique=False``
    accepts a key that repeats (a log whose lines are not keyed).
    """
    path = Path(path)
    if not path.exists():
        return
    seen: dict[Hashable, int] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.endswith("\n"):
                return
            try:
                record = json.loads(line)
                if validate is not None:
                    record = validate(record, f"{path}:{n}")
                k = key(record)
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                why = f"no field {err}" if isinstance(err, KeyError) else str(err)
                article = "an" if what[:1].lower() in "aeiou" else "a"
                raise damaged(f"{path}:{n}", f"not {article} {what} ({why})") from err
            if unique and k in seen:
                raise StoreError(f"{path}:{n}: record {k} repeats line {seen[k]}")
            seen[k] = n
            yield record


def read_json_lines(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a timing file (a torn last line is left out: it holds only timing)."""
    path = Path(path)
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = split_lines(text)
    out = []
    for n, line in enumerate(lines, 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            if n == len(lines) and not text.endswith("\n"):
                break  # a line torn by a kill
            raise StoreError(f"{path}:{n}: not valid JSON ({err})") from err
    return out


class JsonlStore:
    """The records of one store folder; see the module docstring for the format.

    Subclasses set the class attributes and :meth:`key`.
    """

    settings_file: ClassVar[str] = "run.json"
    records_file: ClassVar[str] = "records.jsonl"
    timing_file: ClassVar[str] = "timing.jsonl"
    #: settings that are lists and may grow between runs into one folder (merged, not compared)
    growable: ClassVar[tuple[str, ...]] = ()
    #: settings recorded for the reader but not compared
    informational: ClassVar[tuple[str, ...]] = ()
    #: the value a folder written before a setting existed holds for it
    defaults: ClassVar[dict[str, Any]] = {}
    #: what the folder is, for error messages
    what: ClassVar[str] = "run folder"
    #: what one line is, for error messages
    record_name: ClassVar[str] = "record"
    #: whether a key is stored at most once (False: a log whose lines may repeat a key)
    unique_keys: ClassVar[bool] = True
    #: whether records may hold NaN and infinities (JSON's non-standard ``NaN``, ``-Infinity``)
    allow_nan: ClassVar[bool] = False
    #: the numbers of a record, checked when read back (name -> a kind of :data:`FIELD_KINDS`)
    fields: ClassVar[dict[str, str]] = {}

    def __init__(self, folder: Path, settings: dict[str, Any], records: list[dict[str, Any]],
                 lock: int | None = None, records_path: Path | None = None):
        self.folder = folder
        self.settings = settings
        self.records = records
        self._done = {self.key(r) for r in records}
        self._lock = lock
        self._records_path = records_path

    @staticmethod
    def key(record: dict[str, Any]) -> Hashable:
        """The identity of a record (one line per key)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- life
    def close(self) -> None:
        """Let go of the folder (another process may then write it)."""
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor releases the flock
            self._lock = None

    def __enter__(self) -> JsonlStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self._records_path or self.folder / self.records_file

    @classmethod
    def open(cls, folder: str | Path, settings: dict[str, Any]):
        """Open (or create) a store folder for ``settings``, repairing a torn last line.

        :raises SettingsMismatchError: the folder holds a run with other settings.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        lock = lock_folder(folder)
        try:
            return cls._open(folder, settings, lock)
        except BaseException:
            os.close(lock)
            raise

    @classmethod
    def open_file(cls, path: str | Path, settings: dict[str, Any] | None = None):
        """Open (or create) a lone records file: no folder, no timing; ``flock`` on the file itself.

        A torn last line is cut off and the complete records read (:meth:`read_records`), as :meth:`open` does.
        ``settings``: recorded beside the file (``FILE.settings.json``) and compared on every later open by
        the folders' rule (:meth:`differences`): a file written under other settings, or by a run that
        recorded none, is refused, naming the settings that differ.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = lock_file(path)
        try:
            repair(path)
            if settings is not None:
                settings = cls._file_settings(path, settings)
            records = list(cls.read_records(path))
        except BaseException:
            os.close(lock)
            raise
        return cls(path.parent, settings or {}, records, lock, records_path=path)

    @classmethod
    def _file_settings(cls, path: Path, settings: dict[str, Any]) -> dict[str, Any]:
        settings = json.loads(json.dumps(settings, allow_nan=False))  # normalise (tuples -> lists)
        sidecar = path.with_name(path.name + ".settings.json")
        if sidecar.exists():
            try:
                old = json.loads(sidecar.read_text(encoding="utf-8"))
            except json.JSONDecodeError as err:
                raise StoreError(f"{sidecar}:{err.lineno}: not valid JSON ({err.msg})") from None
            diff = cls.differences(old, settings)
            if diff:
                raise SettingsMismatchError(f"{path} was written by a run with other settings ({sidecar}); use "
                                            "another --out file or the same settings. Differences: " + "; ".join(diff))
        elif _holds_records(path):
            raise SettingsMismatchError(f"{path} holds records but no settings ({sidecar.name} is missing: a file of "
                                        "an older ppl-tok), so they cannot be checked against this run's; use another "
                                        "--out file")
        else:
            write_atomic(sidecar, json.dumps(settings, indent=2, allow_nan=False) + "\n")
        return settings

    @classmethod
    def differences(cls, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
        """The compared settings that differ, one line each (a group of settings, such as the beam's ``search``,
        by the members that differ), each with the flag that resumes the folder (:data:`SETTING_FLAGS`)."""
        old = {**cls.defaults, **old}
        keys = sorted((set(old) | set(new)) - set(cls.growable) - set(cls.informational))
        out = []
        for k in keys:
            a, b = old.get(k), new.get(k)
            if isinstance(a, dict) and isinstance(b, dict):
                out += [_difference(f"{k}.{m}", m, a.get(m), b.get(m)) for m in sorted(set(a) | set(b))
                        if a.get(m) != b.get(m)]
            elif a != b:
                out.append(_difference(k, k, a, b))
        return out

    @classmethod
    def _open(cls, folder: Path, settings: dict[str, Any], lock: int):
        settings = json.loads(json.dumps(settings, allow_nan=False))  # normalise (tuples -> lists)
        settings_path = folder / cls.settings_file
        if settings_path.exists():
            old = cls.read_settings(folder)
            diff = cls.differences(old, settings)
            if diff:
                raise SettingsMismatchError(
                    f"{settings_path} was written by a run with other settings; use another --out folder "
                    f"or the same settings. Differences: " + "; ".join(diff))
            grown = dict(old)
            for name in cls.growable:
                merged = sorted(set(old.get(name, [])) | set(settings.get(name, [])))
                if merged != sorted(old.get(name, [])):
                    grown[name] = merged
            if grown != old:
                write_atomic(settings_path, json.dumps(grown, indent=2, allow_nan=False) + "\n")
            settings = grown
        else:
            cls.check_settings_present(folder)
            write_atomic(settings_path, json.dumps(settings, indent=2, allow_nan=False) + "\n")
        repair(folder / cls.records_file)
        return cls(folder, settings, list(cls.read_records(folder / cls.records_file, settings)), lock)

    @classmethod
    def check_settings_present(cls, folder: str | Path) -> None:
        """A :class:`StoreError` if ``folder`` holds records but no settings file: whose settings they have is
        unknown, so no run may adopt them (the one rule of every store; a command calls it before its model
        loads, :meth:`open` again)."""
        folder = Path(folder)
        if not (folder / cls.settings_file).exists() and _holds_records(folder / cls.records_file):
            raise StoreError(f"{folder} holds records ({cls.records_file}) but no {cls.settings_file}: the settings "
                             "they were computed with are unknown, so they cannot be checked against this run's; "
                             f"use a new --out folder (or restore {cls.settings_file})")

    @classmethod
    def read_settings(cls, folder: str | Path) -> dict[str, Any]:
        """The settings file of a store folder."""
        path = Path(folder) / cls.settings_file
        if not path.is_file():
            raise StoreError(f"{folder} is not a {cls.what}: {cls.settings_file} is missing")
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise StoreError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from err

    @classmethod
    def validate(cls, record: Any, where: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``record`` if it is well formed for a store with ``settings``, else a :class:`StoreError` naming ``where``.

        The default checks the numbers (:func:`check_fields` with :attr:`fields`: no NaN or infinity unless
        :attr:`allow_nan`, each named field of its kind); a subclass adds its records' own rules.
        """
        return check_fields(record, where, cls.fields, cls.allow_nan)

    @classmethod
    def read_records(cls, path: str | Path, settings: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """The complete records of a records file (:func:`read_jsonl_records` with this store's key and checks)."""
        return read_jsonl_records(path, cls.key, cls.record_name,
                                  validate=lambda record, where: cls.validate(record, where, settings),
                                  unique=cls.unique_keys)

    # --------------------------------------------------------------- writes
    def has_key(self, key: Hashable) -> bool:
        """Whether a record with this key is stored."""
        return key in self._done

    def append(self, records: Sequence[dict[str, Any]], timing: dict[str, Any] | None = None) -> None:
        """Append ``records`` durably (one write, flush, fsync), then a timing line if given."""
        if self._lock is None:
            raise StoreError(f"{self.folder}: the store was closed (open the folder again to write it)")
        keys = [self.key(r) for r in records]
        for k in keys:
            if self.unique_keys and k in self._done:
                raise StoreError(f"{self.path}: record {k} is already stored")
        text = "".join(json.dumps(r, allow_nan=self.allow_nan, separators=(",", ":")) + "\n" for r in records)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        self.records.extend(records)
        self._done.update(keys)
        if timing is not None:
            with open(self.folder / self.timing_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(timing, allow_nan=False) + "\n")
