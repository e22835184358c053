"""The engine's memory and batching limits (ppl_tok.lm.config.EngineConfig): validated, derived from the device."""

import re

import pytest

from ppl_tok.lm.config import EngineConfig


def test_engine_config_is_validated():
    with pytest.raises(ValueError, match="max_batch"):
        EngineConfig(max_batch=0)
    with pytest.raises(ValueError, match="cache_bytes"):
        EngineConfig(cache_bytes=-1)
    with pytest.raises(ValueError, match="kv_block_bytes"):
        EngineConfig(kv_block_bytes=0)
    with pytest.raises(ValueError, match="particle_bytes"):
        EngineConfig(particle_bytes=0)


def test_engine_config_defaults_follow_the_device(monkeypatch):
    from ppl_tok.lm import device as device_module

    assert EngineConfig.for_device("cpu") == EngineConfig()
    assert EngineConfig.for_device("cpu", max_batch=7).max_batch == 7
    monkeypatch.setattr(device_module, "total_memory", lambda d: 80 << 30)  # an 80 GiB GPU
    big = EngineConfig.for_device("cuda", model_bytes=16 << 30)  # a 7B model in fp16 leaves 64 GiB
    assert (big.cache_bytes, big.particle_bytes, big.row_bytes) == (16 << 30, 16 << 30, 2 << 30)
    assert big.kv_block_bytes == 1 << 30 and big.max_batch == 1024
    small = EngineConfig.for_device("cuda", model_bytes=72 << 30, kv_block_bytes=1 << 20)  # 8 GiB left
    assert small.max_batch == 512 and small.kv_block_bytes == 1 << 20 and small.cache_bytes == 2 << 30



def test_engine_config_refuses_budgets_beyond_any_machine():
    with pytest.raises(ValueError, match="kv_block_bytes must be a number of bytes in 1.."):
        EngineConfig(kv_block_bytes=10**20)
    with pytest.raises(ValueError, match="cache_bytes"):
        EngineConfig(cache_bytes=10**20)

@pytest.mark.parametrize("field,bad,bound", [
    ("kv_block_bytes", (1 << 36) + 1, "1..68719476736 (64 GiB)"),
    ("particle_bytes", (1 << 40) + 1, "1..1099511627776 (1 TiB)"),
    ("cache_bytes", (1 << 40) + 1, "0..1099511627776 (1 TiB)"),
    ("row_bytes", 1.5, "0..1099511627776 (1 TiB)"),
])
def test_byte_budgets_have_upper_bounds_and_must_be_integers(field, bad, bound):
    with pytest.raises(ValueError, match="^" + re.escape(f"{field} must be a number of bytes in {bound}, got {bad!r}") + "$"):
        EngineConfig(**{field: bad})
    assert getattr(EngineConfig(**{field: 1}), field) == 1  # the smallest allowed
    assert EngineConfig(cache_bytes=0, row_bytes=0).cache_bytes == 0  # the caches may be off


def test_for_device_floors_the_free_memory_and_the_block_size(monkeypatch):
    from ppl_tok.lm import device as device_module

    monkeypatch.setattr(device_module, "total_memory", lambda d: 4 << 30)  # a 4 GiB GPU, a model bigger than it
    tiny = EngineConfig.for_device("cuda", model_bytes=8 << 30)  # free memory floored at 1 GiB
    assert (tiny.cache_bytes, tiny.row_bytes, tiny.kv_block_bytes, tiny.max_batch) == (256 << 20, 32 << 20, 128 << 20, 512)
