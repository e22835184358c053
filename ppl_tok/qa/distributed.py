"""The QA study scaled out on Ray: ``ppl-tok qa run ... --ray [ADDRESS] [--workers K]``.

The driver opens the run folder (:class:`~ppl_tok.qa.store.ScoreStore`), finds
the questions whose records are not all stored, and deals them, in batches of
``batch_questions``, to K Ray actors, each holding one LM (one GPU each when
the cluster has GPUs). An actor only computes: it returns the records of a
batch (:func:`~ppl_tok.qa.run.score_batch`, the single-process code) and the
driver appends them. The store stays the single writer, so its guarantees
carry over unchanged:

* a batch is stored whole or not at all (one write, flush, fsync);
* a worker that dies (killed process, lost node) loses only its batch in
  flight: the driver starts a new actor in its place and deals the batch
  again (at most ``max_retries`` times per batch);
* a driver that dies loses the batches in flight; running the same command
  again computes only what is missing;
* every pair's particles have their own seed, so which worker scores a
  question, and in which order batches finish, does not change any number:
  the records (and ``qa report``) equal a single-process run's. Only the
  order of lines in ``scores.jsonl`` can differ.

``timing.jsonl`` gets, per batch, the driver's wall-clock seconds since the
previous append (so the report's questions/min is the cluster's throughput),
the actor's own seconds and the worker slot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppl_tok.lm.base import LanguageModel
from ppl_tok.lm.spec import DEFAULT_BACKEND, LMSpec
from ppl_tok.qa.data import Study
from ppl_tok.qa.run import Pending, batch_timing, pending_batches, progress_bar, score_batch
from ppl_tok.qa.store import ScoreStore


class DistributedError(RuntimeError):
    """The Ray run cannot go on (the stored batches stay stored: run again to resume)."""


class RayMissingError(ImportError, LookupError):
    """Ray is not installed (a LookupError too, so that the CLI prints it as a one-line error)."""


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError naming the extra to install."""
    try:
        import ray
    except ImportError as err:
        raise RayMissingError("--ray needs Ray: pip install 'ppl-tok[ray]'") from err
    return ray


@dataclass(frozen=True)
class LMLoader:
    """Loads the LM inside an actor: :func:`~ppl_tok.lm.cards.load_lm` of :meth:`spec`, on the actor's GPU
    if Ray gave it one and no device is named."""

    model: str
    device: str | None = None
    dtype: str | None = None
    bos_id: int | None = None
    backend: str = DEFAULT_BACKEND

    @classmethod
    def from_spec(cls, spec: LMSpec) -> LMLoader:
        """The loader of ``spec`` (its device ``None``: the actor's GPU, if it has one)."""
        return cls(spec.model, spec.device, spec.dtype, spec.bos_id, spec.backend)

    def spec(self, device: str | None = None) -> LMSpec:
        """The LM as an :class:`~ppl_tok.lm.spec.LMSpec` (``device``: the loader's, else this one)."""
        return LMSpec(model=self.model, backend=self.backend, device=self.device or device, dtype=self.dtype,
                      bos_id=self.bos_id)

    def __call__(self) -> LanguageModel:
        from ppl_tok.lm.cards import load_lm

        device = None
        if self.device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else None  # Ray sets CUDA_VISIBLE_DEVICES per actor
        return load_lm(self.spec(device))


class QAWorker:
    """A Ray actor's state: one LM, and :func:`~ppl_tok.qa.run.score_batch` on it."""

    def __init__(self, loader: Callable[[], LanguageModel]) -> None:
        self.lm = loader()

    def score(self, batch: list[tuple[str, int, Any]], settings: dict[str, Any],
              todos: list[list[str]]) -> tuple[list[dict[str, Any]], float]:
        """The records of a batch and the seconds they took."""
        t0 = time.perf_counter()
        records = score_batch(self.lm, batch, settings, todos)
        return records, time.perf_counter() - t0


def check_address(address: str | None, timeout: float = 3.0) -> None:
    """A clear error, within ``timeout`` seconds, if ``address`` (``host:port`` or ``ray://host:port``) answers no
    connection; ``None`` and ``auto`` pass (Ray finds the cluster itself). Ray alone retries for about 25 s and
    prints a screen of warnings before it gives up."""
    import socket

    if not address or address == "auto":
        return
    where = address.removeprefix("ray://")
    host, sep, port = where.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--ray {address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise ValueError(f"--ray {address}: no Ray cluster answers there ({err.strerror or err}); start one with "
                         "`ray start --head` or check the address") from None


def connect(address: str | None = None, **init_kwargs: Any) -> Any:
    """Ray, initialised: an existing session is kept; else ``ray.init(address)`` (``None``: a local Ray)."""
    check_address(address)
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address or None, **init_kwargs)
    return ray


def default_workers(ray: Any) -> int:
    """One worker per GPU of the cluster, else one per CPU."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    return gpus if gpus > 0 else max(1, int(resources.get("CPU", 1)))


def run_study_ray(study: Study, loader: Callable[[], LanguageModel], out: str | Path, settings: dict[str, Any], *,
                  workers: int | None = None, address: str | None = None, batch_questions: int = 8,
                  progress: bool = True, max_retries: int = 3,
                  on_append: Callable[[list[Pending]], None] | None = None) -> ScoreStore:
    """:func:`~ppl_tok.qa.run.run_study` with the batches scored by ``workers`` Ray actors.

    :param loader: builds the LM inside each actor (picklable; :class:`LMLoader` for a card, folder or hub id).
    :param workers: actors (default: one per GPU of the cluster, else one per CPU); at most one per batch.
    :param address: the Ray cluster (``"auto"``, ``"ray://host:10001"``, ...; default: a local Ray,
        unless Ray is already initialised in this process).
    :param max_retries: how often one batch may be lost to a dead worker before the run stops.
    :param on_append: called after each batch is stored (tests use it to stop the driver mid-run).
    """
    ray = connect(address)
    store = ScoreStore.open(out, settings)
    total, chunks = pending_batches(study, store, batch_questions)
    if not chunks:
        store.close()
        return store
    gpus = int(ray.cluster_resources().get("GPU", 0))
    k = min(workers if workers is not None else default_workers(ray), len(chunks))
    if k < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    actor_class = ray.remote(QAWorker).options(num_cpus=1, num_gpus=1 if gpus > 0 else 0)
    actors = {slot: actor_class.remote(loader) for slot in range(k)}
    queue = list(range(len(chunks)))
    failures = [0] * len(chunks)
    in_flight: dict[Any, tuple[int, int]] = {}  # ref -> (slot, chunk)

    def submit(slot: int) -> None:
        if queue:
            c = queue.pop(0)
            batch = chunks[c]
            ref = actors[slot].score.remote([item for item, _ in batch], store.settings, [todo for _, todo in batch])
            in_flight[ref] = (slot, c)

    bar = progress_bar(study, total, chunks, enabled=progress)
    last = time.perf_counter()
    try:
        for slot in actors:
            submit(slot)
        while in_flight:
            (ref,), _ = ray.wait(list(in_flight), num_returns=1)
            slot, c = in_flight.pop(ref)
            try:
                records, worker_seconds = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                failures[c] += 1
                if failures[c] > max_retries:
                    raise DistributedError(f"batch {c} was lost to a dead worker {failures[c]} times; the stored "
                                           f"batches are kept: run again to resume ({err})") from err
                ray.kill(actors[slot], no_restart=True)
                actors[slot] = actor_class.remote(loader)
                queue.insert(0, c)
                submit(slot)
                continue
            now = time.perf_counter()
            store.append(records, timing=batch_timing(chunks[c], now - last, worker_seconds=worker_seconds,
                                                      worker=slot))
            last = now
            bar.update(len(chunks[c]))
            if on_append is not None:
                on_append(chunks[c])
            submit(slot)
    finally:
        store.close()
        bar.close()
        for actor in actors.values():
            ray.kill(actor, no_restart=True)
    return store


def benchmark(study: Study, loader: Callable[[], LanguageModel], settings: dict[str, Any], workers: list[int],
              folder: str | Path, *, batch_questions: int = 1) -> list[dict[str, Any]]:
    """Questions/min of a fresh Ray run of ``study`` with each number of ``workers`` (one run folder each).

    Wall-clock from the first dealt batch to the last append, so LM loading in
    the actors is included once per run; the actors' start-up is reported apart.
    """
    ray = connect()
    rows = []
    for k in workers:
        out = Path(folder) / f"workers-{k}"
        t0 = time.perf_counter()
        run_study_ray(study, loader, out, settings, workers=k, batch_questions=batch_questions, progress=False)
        wall = time.perf_counter() - t0
        questions = sum(len(qs) for qs in study.splits.values())
        rows.append({"workers": k, "questions": questions, "seconds": wall,
                     "questions_per_minute": 60 * questions / wall, "cpus": ray.cluster_resources().get("CPU")})
    return rows
