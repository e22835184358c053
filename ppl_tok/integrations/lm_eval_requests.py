"""An lm-eval task's ``loglikelihood`` requests as ``(context, continuation)`` pairs, read through lm-eval's task API.

:func:`task_pairs` builds a task with lm-eval's own ``TaskManager`` (the tasks of a folder,
``include_path``, such as those ``ppl-tok-lm-eval write-tasks`` writes, or lm-eval's bundled ones),
then its requests with ``Task.build_all_requests`` (the same call ``simple_evaluate`` makes, so
the contexts carry the task's few-shot examples, ``description`` and ``target_delimiter`` exactly
as a model would be handed them), and keeps the ``loglikelihood`` ones: for a multiple-choice task,
one pair per (document, choice). This is the input of the boundary report
(:func:`ppl_tok.strings.boundary.boundary_report`, ``ppl-tok boundary --task``). The data must be
local or cached: set ``HF_DATASETS_OFFLINE=1`` to keep lm-eval from the network.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def task_pairs(task: str, tasks_dir: str | Path | None = None, *, limit: int | None = None,
               include_defaults: bool | None = None) -> list[tuple[str, str]]:
    """The ``(context, continuation)`` of every ``loglikelihood`` request of lm-eval task ``task``, in lm-eval's order
    (document, then choice).

    :param tasks_dir: a folder of task YAML files (lm-eval's ``--include_path``); ``None``: lm-eval's own tasks.
    :param limit: the first documents only (lm-eval's ``--limit``).
    :param include_defaults: whether lm-eval's bundled tasks are indexed too (default: only without ``tasks_dir``,
        which is faster and keeps a folder's task from being shadowed).
    :raises ValueError: lm-eval is missing, the task is unknown (the folder's tasks named), or it has no
        ``loglikelihood`` requests (a generation task).
    """
    try:
        from lm_eval.tasks import TaskManager
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ValueError("reading an lm-eval task needs lm-evaluation-harness 0.4: pip install 'ppl-tok[lm-eval]'; "
                         "or give the requests as JSON Lines") from err
    if tasks_dir is not None and not Path(tasks_dir).is_dir():
        raise ValueError(f"--tasks-dir {tasks_dir}: no such folder (a folder of lm-eval task YAML files, e.g. what "
                         "ppl-tok-lm-eval write-tasks --out wrote)")
    defaults = tasks_dir is None if include_defaults is None else include_defaults
    manager = TaskManager(include_path=None if tasks_dir is None else str(tasks_dir), include_defaults=defaults)
    if task not in manager.all_tasks:
        where = f"in {tasks_dir}" if tasks_dir is not None else "among lm-eval's tasks"
        known = ", ".join(sorted(manager.all_tasks)[:12]) or "none"
        raise ValueError(f"lm-eval task {task!r} not found {where} (known: {known}); give --tasks-dir the folder "
                         "that holds its YAML file")
    pairs: list[tuple[str, str]] = []
    for obj in manager.load([task])["tasks"].values():  # a group's tasks, flat
        obj.build_all_requests(limit=limit, rank=0, world_size=1)
        instances = sorted(obj.instances, key=lambda r: (r.doc_id, r.idx))
        pairs += [(str(r.args[0]), str(r.args[1])) for r in instances if r.request_type == "loglikelihood"]
    if not pairs:
        raise ValueError(f"lm-eval task {task!r} has no loglikelihood requests (a generation task?): the boundary "
                         "report needs (context, continuation) pairs")
    return pairs


def task_boundary_report(lm: Any, task: str, tasks_dir: str | Path | None = None, *, limit: int | None = None,
                         config: Any = None, threshold: float | None = None) -> Any:
    """The boundary report (:func:`~ppl_tok.strings.boundary.boundary_report`) of lm-eval task ``task``'s requests
    (:func:`task_pairs`) under ``lm``."""
    from ppl_tok.strings.boundary import THRESHOLD, boundary_report

    return boundary_report(lm, task_pairs(task, tasks_dir, limit=limit), config,
                           THRESHOLD if threshold is None else threshold)


__all__ = ["task_boundary_report", "task_pairs"]
