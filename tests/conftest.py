"""Shared fixtures. ``../shared`` (beside the project root) holds the real data."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
LLAMA2 = SHARED / "tokenizers" / "llama2" / "tokenizer.model"


def pytest_collection_finish(session):
    """Freeze the heap that collection built (torch, transformers, every test module: about 400,000 objects).

    The automatic collections of the oldest generation otherwise walk that whole heap each time (up to 1.6 s on a
    loaded 2-core machine; ``LanguageModel.clear_cache`` collects only the young generations). Frozen objects are
    skipped by the collector; everything a test creates after this point is collected as before, so what
    ``clear_cache`` frees, and what the memory tests check, is unchanged. The one collection first keeps
    import-time garbage out of the frozen set.

    When a selected test uses the session's SmolLM2, it is loaded first, so that the frozen heap holds it too: its
    first load imports transformers' model and tokenizer code, about 190,000 objects more, which every later
    collection would walk again (0.12 s each on a loaded 2-core machine: 80 % of the time of
    ``tests/infer/test_adversarial.py``, which clears a cache 24 times a test). The model lives for the session.
    """
    if not session.config.option.collectonly and any("smollm2" in getattr(item, "fixturenames", ())
                                                     for item in session.items):
        _session_smollm2()
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs ``-n 2 --dist loadgroup``): the tests on a local Ray run on one worker,
    one after the other, as they do without xdist (two Ray clusters of 2 CPUs each on one 2-core machine would
    only fight); the tests of a module with a module-scoped fixture (the wheel and its virtual environment, a
    loaded Gemma, a trained tokenizer) stay together, so that the fixture is built once, not once per worker;
    each worker's torch, and the processes its tests start (``OMP_NUM_THREADS``: the wheel's tutorials, the command
    line), take its share of the cores, not all of them (2 threads in each of 2 workers on 2 cores cost up to 3
    times the CPU of one for the same numbers); and the slow tests that are in no group start first. xdist hands
    out the groups first (largest first), then the other tests in collection order, and a worker queues up to 2
    tests ahead: slow tests collected last (``tests/suites/test_data_canonical.py``, minutes each) would otherwise
    end the run on one worker while the other idles. No test's outcome changes."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        import torch

        share = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(share)
        os.environ["OMP_NUM_THREADS"] = str(share)  # and so do the processes a test starts (the wheel's tutorials)
    for item in items:
        if "local_ray" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ray"))
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d.scope == "module" for ds in defs for d in ds):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    if workers > 1:
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: the order is kept otherwise


@pytest.fixture(scope="session")
def llama2_vocab():
    from ppl_tok import Vocabulary

    return Vocabulary.from_sentencepiece(LLAMA2)


@pytest.fixture(scope="session")
def smollm2_vocab():
    from ppl_tok import load_vocabulary

    return load_vocabulary("smollm2-135m")


@pytest.fixture(scope="session")
def gemma_vocab():
    from ppl_tok import load_vocabulary

    return load_vocabulary("gemma3-270m")


_SESSION_LM: dict = {}


def _session_smollm2():
    """SmolLM2, loaded once per process (before the heap is frozen, see :func:`pytest_collection_finish`)."""
    if "smollm2" not in _SESSION_LM:
        from ppl_tok import load_lm

        _SESSION_LM["smollm2"] = load_lm("smollm2-135m")
    return _SESSION_LM["smollm2"]


@pytest.fixture(scope="session")
def smollm2():
    return _session_smollm2()


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs for one test module (the actors get ``tests/`` and the checkout on their path)."""
    import os

    ray = pytest.importorskip("ray", reason="needs the ray extra: pip install 'ppl-tok[ray]'")
    if ray.is_initialized():
        ray.shutdown()
    path = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}})
    yield ray
    ray.shutdown()
