"""The KV pool: slots in fixed-size blocks, gathers across blocks, growth without copies, trimming."""

import random

import pytest
import torch

from ppl_tok.lm.kvpool import KVNode, KVPool, padded_index

LAYERS, HEADS, DIM = 3, 2, 4


def entries(n, seed):
    g = torch.Generator().manual_seed(seed)
    keys = [torch.randn(n, HEADS, DIM, generator=g) for _ in range(LAYERS)]
    values = [torch.randn(n, HEADS, DIM, generator=g) for _ in range(LAYERS)]
    return keys, values


def small_pool(slots_per_block=16):
    slot_bytes = 2 * LAYERS * HEADS * DIM * 4
    return KVPool(block_bytes=slots_per_block * slot_bytes)


def test_blocks_grow_one_at_a_time_and_never_overshoot_by_more_than_one():
    pool = small_pool()
    held = []
    for step in range(20):
        keys, values = entries(7, step)
        held.append(KVNode(pool, pool.store(keys, values)))
        assert pool.block_slots == 16
        assert pool.used == 7 * (step + 1)
        assert pool.used <= pool.capacity < pool.used + pool.block_slots
        assert pool.nbytes() == pool.capacity * pool.slot_bytes


def test_gathers_across_blocks_return_what_was_stored():
    pool = small_pool()
    truth = {}
    nodes = []
    rng = random.Random(0)
    for step in range(12):
        keys, values = entries(rng.randint(1, 9), step)
        slots = pool.store(keys, values)
        for i, s in enumerate(slots.tolist()):
            truth[s] = ([k[i] for k in keys], [v[i] for v in values])
        nodes.append(KVNode(pool, slots))
        if step % 3 == 2:  # free some slots so that later stores reuse them, scattered over blocks
            nodes.pop(rng.randrange(len(nodes)))
    assert len({s // pool.block_slots for s in truth}) > 2
    # ragged prefixes made of live slots from several blocks, left-padded
    live = torch.cat([n.slots for n in nodes]).tolist()
    rows = [KVNode(pool, torch.tensor(rng.sample(live, rng.randint(1, len(live))))) for _ in range(5)]
    index, mask = padded_index(rows)
    plan = pool.plan(index, mask)
    assert len(plan.parts) > 1
    for layer in range(LAYERS):
        k, v = pool.gather(layer, plan)
        assert k.shape == (5, HEADS, index.shape[1], DIM)
        for b, row in enumerate(rows):
            for j, s in enumerate(row.slots.tolist()):
                col = index.shape[1] - len(row) + j
                assert torch.equal(k[b, :, col], truth[s][0][layer])
                assert torch.equal(v[b, :, col], truth[s][1][layer])
            assert torch.isfinite(k[b]).all()  # padding reads a real slot, never garbage
        # gathered straight into the first columns of a wider tensor (how a forward uses it)
        wide = [torch.full((5, HEADS, index.shape[1] + 2, DIM), 7.0) for _ in range(2)]
        pool.gather(layer, plan, (wide[0][:, :, :-2], wide[1][:, :, :-2]))
        assert torch.equal(wide[0][:, :, :-2], k) and torch.equal(wide[1][:, :, :-2], v)
        assert (wide[0][:, :, -2:] == 7).all()
        one = pool.plan(rows[0].slots.unsqueeze(0)[:, :1])  # a single block: the other path
        assert len(one.parts) == 1
        assert torch.equal(pool.gather(layer, one)[0][0, :, 0], truth[int(rows[0].slots[0])][0][layer])


def test_trim_gives_back_blocks_with_no_live_slot_and_keeps_the_rest():
    pool = small_pool()
    first = KVNode(pool, pool.store(*entries(16, 0)))   # block 0, full
    second = KVNode(pool, pool.store(*entries(16, 1)))  # block 1
    kept_keys = pool.gather(0, pool.plan(second.slots.unsqueeze(0)))[0].clone()
    del first
    assert pool.trim() == pool.block_slots * pool.slot_bytes
    assert pool.capacity == 16 and pool.used == 16
    assert torch.equal(pool.gather(0, pool.plan(second.slots.unsqueeze(0)))[0], kept_keys)
    third = KVNode(pool, pool.store(*entries(4, 2)))  # reuses the trimmed block's place
    assert set((third.slots // pool.block_slots).tolist()) == {0}
    del second, third
    pool.trim()
    assert pool.capacity == 0 and pool.nbytes() == 0 and pool.used == 0


def test_block_size_is_validated():
    with pytest.raises(ValueError, match="block_bytes"):
        KVPool(block_bytes=0)


def test_the_attention_scratch_is_reused_and_grows_by_half():
    pool = small_pool()
    like = torch.zeros(1)
    a = pool.scratch(0, (2, 3, 4), like)
    b = pool.scratch(0, (2, 3, 2), like)  # smaller: the same memory
    assert a.is_contiguous() and b.is_contiguous() and b.shape == (2, 3, 2)
    assert b.data_ptr() == a.data_ptr()
    assert pool.scratch(1, (1,), like).data_ptr() != a.data_ptr()  # keys and values apart
    c = pool.scratch(0, (5, 5), like)  # larger: a new buffer of max(need, 1.5x)
    assert c.shape == (5, 5) and pool._scratch[0].numel() == 36


def test_a_block_holds_at_most_max_block_slots():
    from ppl_tok.lm.kvpool import MAX_BLOCK_SLOTS

    pool = KVPool(block_bytes=1 << 30)  # 1 GiB of 192-byte slots would be 5.6 million
    pool.store(*entries(3, 0))
    assert pool.block_slots == MAX_BLOCK_SLOTS and len(pool.free) == MAX_BLOCK_SLOTS - 3


def test_releases_counted_at_once_leave_the_free_list_of_releasing_one_at_a_time():
    def run(flush_each: bool) -> tuple[list[int], list[int]]:
        pool = small_pool()
        rng = random.Random(3)
        base = [KVNode(pool, pool.store(*entries(5, k))) for k in range(4)]
        # nodes sharing slots (prefixes of each other, as a forward's new nodes share their pasts)
        shared = [KVNode(pool, torch.cat([base[k % 4].slots, base[(k + 1) % 4].slots[:2]])) for k in range(6)]
        nodes = base + shared
        del base, shared  # the list holds the only references
        rng.shuffle(nodes)
        while nodes:
            nodes.pop()  # dies: its slots are released
            if flush_each:
                pool.free  # noqa: B018 - reading the free list counts the releases
        return list(pool.free), pool.refs.tolist()

    assert run(True) == run(False)
    free, refs = run(False)
    assert not any(refs) and len(free) == len(set(free)) == 32  # two blocks of 16, every slot free again


def test_padded_index_is_left_padded_row_by_row():
    pool = small_pool()
    slots = pool.store(*entries(8, 0))
    nodes = [KVNode(pool, slots[:3]), KVNode(pool, slots[:0]), KVNode(pool, slots[3:8])]
    index, mask = padded_index(nodes)
    assert index.shape == mask.shape == (3, 5)
    assert mask.tolist() == [[False, False, True, True, True], [False] * 5, [True] * 5]
    assert index[0, 2:].tolist() == slots[:3].tolist() and index[2].tolist() == slots[3:8].tolist()
    assert index[~mask].tolist() == [0] * 7
    wide, wide_mask = padded_index(nodes, 7)
    assert wide[:, 2:].tolist() == index.tolist() and not wide_mask[:, :2].any()
