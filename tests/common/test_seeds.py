from ppl_tok.common.seeds import pair_seed


def test_pair_seed_is_a_31_bit_hash_of_its_names():
    s = pair_seed(0, "test", "8-376", 2)
    assert s == pair_seed(0, "test", "8-376", 2) and 0 <= s < 2 ** 31
    assert len({pair_seed(0, "test", "q", j) for j in range(4)} | {pair_seed(1, "test", "q", 0),
                                                                   pair_seed(0, "tune", "q", 0)}) == 6
    # the value the stored studies were drawn with (sha256 of "0/test/8-376/2", first 31 bits)
    import hashlib
    assert s == int.from_bytes(hashlib.sha256(b"0/test/8-376/2").digest()[:4], "big") & 0x7FFFFFFF
