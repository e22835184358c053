"""Batches dealt to Ray actors, the driver the single writer: the loop every ``--ray`` run of ppl-tok shares.

A run on Ray (``ppl-tok qa run --ray``, ``ppl-tok perplexity --ray``,
``ppl-tok surprisal --ray``) has one driver and K actors. Each actor builds
its state once (an LM: :class:`ppl_tok.lm.loader.LMLoader`) and then only
computes: ``work(state, batch)`` returns a batch's records. The driver deals
the batches (:meth:`ActorPool.deal`), receives results in the order they
finish and hands each to ``done``, which appends it to the run's store, so
the store stays the single writer and keeps its guarantees
(:mod:`ppl_tok.common.jsonl_store`):

* a batch is stored whole or not at all;
* a worker that dies (killed process, lost node) loses only its batch in
  flight: a new actor takes its slot and the batch is dealt again, at most
  ``max_retries`` times per batch (then :class:`DistributedError`);
* a driver that dies loses the batches in flight; the same command run again
  computes only what is missing;
* a batch's records do not depend on the worker or the order batches finish
  in when ``work`` seeds per item (what the callers' ``work`` does), so the
  records equal a single-process run's; only the order of lines can differ.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any


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


class Worker:
    """A Ray actor's state: ``build()``'s value (an LM), and ``work(state, batch)`` on it."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self.state = build()

    def run(self, work: Callable[[Any, Any], Any], batch: Any) -> tuple[Any, float]:
        """``work(state, batch)`` and the seconds it took."""
        t0 = time.perf_counter()
        result = work(self.state, batch)
        return result, time.perf_counter() - t0


#: ``done(batch number, result, the actor's seconds, the worker slot)``: the driver's write of one batch
Done = Callable[[int, Any, float, int], None]


class ActorPool:
    """Up to ``workers`` actors (started as needed), each with ``build()``'s state; one GPU each where the
    cluster has GPUs, else one CPU. ``with ActorPool(...) as pool``: the actors are killed at the end."""

    def __init__(self, build: Callable[[], Any], workers: int | None = None) -> None:
        self.ray = import_ray()
        if not self.ray.is_initialized():
            raise DistributedError("Ray is not initialised: call connect() first")
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.build = build
        self.workers = workers if workers is not None else default_workers(self.ray)
        gpus = int(self.ray.cluster_resources().get("GPU", 0))
        self._class = self.ray.remote(Worker).options(num_cpus=1, num_gpus=1 if gpus > 0 else 0)
        self.actors: dict[int, Any] = {}

    def __enter__(self) -> ActorPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Kill every actor."""
        for actor in self.actors.values():
            self.ray.kill(actor, no_restart=True)
        self.actors.clear()

    def actor(self, slot: int) -> Any:
        """The actor of ``slot``, started if there is none."""
        if slot not in self.actors:
            self.actors[slot] = self._class.remote(self.build)
        return self.actors[slot]

    def replace(self, slot: int) -> None:
        """Kill the actor of ``slot``; the next :meth:`actor` call starts a fresh one."""
        old = self.actors.pop(slot, None)
        if old is not None:
            self.ray.kill(old, no_restart=True)

    def call(self, work: Callable[[Any, Any], Any], batch: Any, slot: int = 0) -> Any:
        """``work(state, batch)`` on one actor, waited for (a query before dealing: the LM's facts)."""
        try:
            result, _ = self.ray.get(self.actor(slot).run.remote(work, batch))
        except self.ray.exceptions.RayActorError as err:
            self.replace(slot)
            raise DistributedError(f"the worker died before the run started ({err})") from err
        return result

    def deal(self, batches: Sequence[Any], work: Callable[[Any, Any], Any], done: Done, *,
             max_retries: int = 3) -> None:
        """Compute ``work(state, batch)`` for every batch on the actors and hand each result to ``done``, in the
        order they finish; a batch lost to a dead actor is dealt again (a new actor in its slot), at most
        ``max_retries`` times, then :class:`DistributedError`. An exception of ``work`` itself stops the run."""
        ray = self.ray
        queue = list(range(len(batches)))
        failures = [0] * len(batches)
        in_flight: dict[Any, tuple[int, int]] = {}  # ref -> (slot, batch)

        def submit(slot: int) -> None:
            if queue:
                c = queue.pop(0)
                in_flight[self.actor(slot).run.remote(work, batches[c])] = (slot, c)

        for slot in range(min(self.workers, len(batches))):
            submit(slot)
        while in_flight:
            (ref,), _ = ray.wait(list(in_flight), num_returns=1)
            slot, c = in_flight.pop(ref)
            try:
                result, seconds = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                failures[c] += 1
                if failures[c] > max_retries:
                    raise DistributedError(f"batch {c} was lost to a dead worker {failures[c]} times; the stored "
                                           f"batches are kept: run again to resume ({err})") from err
                self.replace(slot)
                queue.insert(0, c)
                submit(slot)
                continue
            done(c, result, seconds, slot)
            submit(slot)
