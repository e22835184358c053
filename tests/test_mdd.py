from collections import Counter

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppl_tok import ByteFallback, NoTokenizationError, Vocabulary, compile_mdd, compile_mdd_naive

FIG1 = {
    " Tokenizations": 3632,
    " Tokenizations grow": 54480,
    " Tokenizations grow rapidly": 3759120,
    " Tokenizations grow rapidly with": 48868560,
    " Tokenizations grow rapidly with sentence": 8356523760,
    " Tokenizations grow rapidly with sentence length": 350973997920,
}


@pytest.mark.parametrize("text,count", sorted(FIG1.items()))
def test_fig1_counts_llama2(llama2_vocab, text, count):
    assert compile_mdd(text, llama2_vocab).count() == count


def test_tokens_has_52_tokenizations(llama2_vocab):
    mdd = compile_mdd(" Tokens", llama2_vocab)
    assert mdd.count() == 52
    paths = list(mdd.enumerate())
    assert len(paths) == len(set(paths)) == 52
    assert mdd.describe(mdd.canonical()) == ["\u2581Tok", "ens"]


def test_mdd_is_a_networkx_multidigraph(llama2_vocab):
    mdd = compile_mdd(" Bird", llama2_vocab)
    assert isinstance(mdd, nx.MultiDiGraph)
    assert nx.is_directed_acyclic_graph(mdd)
    assert mdd.source == 0 and mdd.sink == 5
    # networkx's own path counting agrees with the DP
    assert len(list(nx.all_simple_paths(mdd, 0, 5))) <= mdd.count()
    assert sum(1 for _ in nx.all_simple_edge_paths(mdd, 0, 5)) == mdd.count() == 14


def brute_force(text: bytes, surfaces: list) -> list[tuple[int, ...]]:
    """Every tokenization by recursion over the raw vocabulary (no trie, no graph)."""
    if not text:
        return [()]
    out = []
    for t, s in enumerate(surfaces):
        if s is not None and text.startswith(s):
            out += [(t,) + rest for rest in brute_force(text[len(s):], surfaces)]
    return out


alphabet = st.sampled_from("abc")
tokens = st.text(alphabet, min_size=1, max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(tokens, min_size=1, max_size=8), st.text(alphabet, min_size=1, max_size=10))
def test_mdd_properties_on_random_toy_vocabularies(pieces, text):
    vocab = Vocabulary.from_tokens(pieces)
    truth = brute_force(text.encode(), list(vocab.surfaces))
    try:
        mdd = compile_mdd(text, vocab)
    except NoTokenizationError:
        assert truth == []
        return
    paths = list(mdd.enumerate())
    assert sorted(paths) == sorted(truth)
    assert mdd.count() == len(truth) == len(set(paths))
    for p in paths:
        assert vocab.decode(p) == text.encode()
        assert mdd.accepts(p)
    assert list(mdd.enumerate(limit=1)) == paths[:1]
    naive = compile_mdd_naive(text, vocab)
    assert sorted(naive.edges(keys=True)) == sorted(mdd.edges(keys=True))
    assert sorted(naive.nodes) == sorted(mdd.nodes)
    # every node lies on a complete path (pruned)
    assert all(mdd.path_counts[n] > 0 for n in mdd.nodes)
    assert all(nx.has_path(mdd, 0, n) for n in mdd.nodes)


def test_duplicate_surfaces_are_parallel_edges():
    vocab = Vocabulary.from_tokens(["a", "a", "aa"])
    mdd = compile_mdd("aa", vocab)
    assert mdd.count() == 5  # (0|1)(0|1) and aa
    assert mdd.number_of_edges(0, 1) == 2


def test_accepts_rejects_non_paths():
    vocab = Vocabulary.from_tokens([None, "a", "b", "ab"])
    mdd = compile_mdd("ab", vocab)
    assert mdd.accepts([3]) and mdd.accepts([1, 2])
    assert not mdd.accepts([1]) and not mdd.accepts([2, 1]) and not mdd.accepts([0, 3])
    assert not mdd.accepts([99])


def test_uniform_sampling_is_uniform_and_seeded():
    vocab = Vocabulary.from_tokens(["a", "aa", "aaa"])
    mdd = compile_mdd("aaaa", vocab)  # 7 tokenizations
    draws = mdd.sample(7000, seed=1)
    assert draws == mdd.sample(7000, seed=1)
    counts = Counter(draws)
    assert set(counts) == set(mdd.enumerate())
    chi2 = sum((c - 1000) ** 2 / 1000 for c in counts.values())
    assert chi2 < 22.46  # chi-square, 6 dof, p = 0.001


def test_sampling_big_counts_is_exact(llama2_vocab):
    mdd = compile_mdd(" Tokenizations grow rapidly with sentence length", llama2_vocab)
    for path in mdd.sample(20, seed=0):
        assert mdd.accepts(path)


def test_empty_text_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        compile_mdd("", Vocabulary.from_tokens(["a"]))


def test_uncovered_characters_are_named(smollm2_vocab):
    with pytest.raises(NoTokenizationError, match=r"U\+0004\) at character 2, byte 2"):
        compile_mdd("ab\x04c", smollm2_vocab)
    with pytest.raises(NoTokenizationError, match="raw byte 0xFF"):
        compile_mdd(b"x\xff".decode("latin-1").encode("latin-1"), smollm2_vocab)


def test_covered_but_untokenizable_is_explained():
    vocab = Vocabulary.from_tokens(["ab", "bc"])
    with pytest.raises(NoTokenizationError, match="gets past byte 2"):
        compile_mdd("abc", vocab)


def test_byte_fallback_policies():
    pieces = ["a", "b"] + [f"<0x{b:02X}>" for b in range(256)]
    paper = Vocabulary.from_tokens(pieces)
    # 'a' and 'b' are ordinary: bytes are not used for them
    assert compile_mdd("ab", paper).count() == 1
    # 'é' (2 bytes) has no ordinary piece: spelled by its two byte pieces
    mdd = compile_mdd("aé", paper)
    assert mdd.count() == 1 and mdd.describe(next(mdd.enumerate())) == ["a", "<0xC3>", "<0xA9>"]
    always = Vocabulary.from_tokens(pieces, fallback=ByteFallback.ALWAYS)
    assert compile_mdd("ab", always).count() == 4
    never = Vocabulary.from_tokens(pieces, fallback="never")
    with pytest.raises(NoTokenizationError, match="U\\+00E9"):
        compile_mdd("aé", never)


def test_llama2_falls_back_to_bytes_only_where_needed(llama2_vocab):
    mdd = compile_mdd(" 🩏", llama2_vocab)  # no piece for this emoji
    (path,) = list(mdd.enumerate())
    assert all(t in llama2_vocab.byte_fallback_ids for t in path[1:])
    assert llama2_vocab.decode(path) == " 🩏".encode()


def test_dot_and_png_export(tmp_path, llama2_vocab):
    mdd = compile_mdd(" Bird", llama2_vocab)
    dot = mdd.to_dot(tmp_path / "bird.dot")
    assert dot.startswith("digraph mdd") and dot.count("->") == mdd.number_of_edges() == 13
    assert '"\u2581Bird"' in dot
    mdd.draw(tmp_path / "bird.png")
    assert (tmp_path / "bird.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    big = compile_mdd(" Tokenizations grow rapidly", llama2_vocab)
    with pytest.raises(ValueError, match="drawing is limited"):
        big.draw(tmp_path / "big.png", max_edges=10)


@pytest.mark.parametrize("text", ["hello world", " tongueless", "Hello\n\n  x", "x" * 40, "héllo 世界"])
def test_trie_and_naive_compilers_agree_on_real_vocabularies(smollm2_vocab, text):
    a, b = compile_mdd(text, smollm2_vocab), compile_mdd_naive(text, smollm2_vocab)
    assert sorted(a.edges(keys=True)) == sorted(b.edges(keys=True))
    assert a.count() == b.count()


def test_count_memory_is_linear_and_log_counts_agree():
    import math
    import tracemalloc

    vocab = Vocabulary.from_tokens(["a", "aa", "aaa"])
    small = compile_mdd("a" * 30, vocab)
    assert small.count() == small.path_counts[0]
    assert all(math.isclose(small.log_path_counts[n], math.log(c), rel_tol=1e-12)
               for n, c in small.path_counts.items())
    assert small.capped_path_counts(100) == {n: min(c, 100) for n, c in small.path_counts.items()}
    with pytest.raises(ValueError, match="cap"):
        small.capped_path_counts(0)
    mdd = compile_mdd("a" * 40_000, vocab)  # tribonacci: about 10,600 digits
    tracemalloc.start()
    count = mdd.count()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert count.bit_length() > 35_000
    assert peak < 4_000_000  # the quadratic dict of every node's count is about 100 MB here
    logs = mdd.log_path_counts
    assert logs[0] == pytest.approx(count.bit_length() * math.log(2), rel=1e-4)


# ------------------------------------- the compiler against its e9ead21 definition (benchmarks/mdd.py)
HOSTILE = ["ab\x04c", " 🩏 héllo 世界", "x" * 300, "e\u0301 \U0001F600!", "\t\n  \r\n", " " * 40, "<|endoftext|>",
           "\u2581\u2581 a", b"x\xff y\xc3".decode("latin-1")]


def _layout(mdd) -> tuple:
    """Everything networkx shows of a graph, in its order: nodes, successors, predecessors, edges, attributes."""
    return (list(mdd.nodes(data=True)), [(i, list(mdd.succ[i].items())) for i in mdd],
            [(i, list(mdd.pred[i].items())) for i in mdd], list(mdd.edges(keys=True, data=True)), dict(mdd.graph))


def _data_texts(step: int) -> list[str]:
    from conftest import SHARED
    from ppl_tok.datasets import find_data_files, load_questions, texts_of

    return [t for f in find_data_files(SHARED / "data") for t in texts_of(load_questions(f))][::step]


@pytest.mark.parametrize("vocab_fixture,policy", [
    ("smollm2_vocab", "paper"), ("llama2_vocab", "paper"), ("llama2_vocab", "always"), ("llama2_vocab", "never"),
    pytest.param("gemma_vocab", "paper", marks=pytest.mark.slow),
    pytest.param("gemma_vocab", "always", marks=pytest.mark.slow),
    pytest.param("gemma_vocab", "never", marks=pytest.mark.slow)])
def test_compiler_is_identical_to_the_e9ead21_compiler(request, vocab_fixture, policy):
    """Same nodes, edges, keys, attributes and order, counts, samples, the same error, on data texts and hostile
    ones, under each byte-fallback policy; the compiled lists and the networkx graph read from them agree."""
    import dataclasses

    from benchmarks.mdd import compile_mdd_e9ead21

    vocab = dataclasses.replace(request.getfixturevalue(vocab_fixture), fallback=policy)
    data = _data_texts(3000)
    for text in data + HOSTILE:
        try:
            old = compile_mdd_e9ead21(text, vocab)
        except NoTokenizationError as error:
            with pytest.raises(NoTokenizationError) as raised:
                compile_mdd(text, vocab)
            assert str(raised.value) == str(error)
            continue
        lists = compile_mdd(text, vocab)  # counted, sampled and enumerated before networkx's dicts exist
        assert "_out" in lists.__dict__
        assert lists.count() == old.count() and lists.log_path_counts == old.log_path_counts
        assert lists.sample(5, seed=3) == old.sample(5, seed=3)
        assert list(lists.enumerate(limit=20)) == list(old.enumerate(limit=20))
        assert all(lists.out_tokens(i) == old.out_tokens(i) for i in old)
        for path in old.sample(3, seed=1):
            assert lists.accepts(path) and not lists.accepts(path[:-1]) and not lists.accepts(path + path[-1:])
        if policy == "paper" and text in data:  # the hostile ones include texts the tokenizer does not round-trip
            assert lists.accepts(vocab.encode(text)) == old.accepts(vocab.encode(text))
        assert _layout(lists) == _layout(old) and "_out" not in lists.__dict__


def _brute_force_over(text: bytes, vocab: Vocabulary) -> list[tuple[int, ...]]:
    """Every tokenization of ``text`` by recursion over the vocabulary's ids whose surface occurs in it."""
    pieces = {text[i:j] for i in range(len(text)) for j in range(i + 1, len(text) + 1)}
    items = [(t, s) for t, s in enumerate(vocab.surfaces) if s in pieces and t not in vocab.byte_fallback_ids]

    def rest(at: int) -> list[tuple[int, ...]]:
        if at == len(text):
            return [()]
        return [(t,) + more for t, s in items if text.startswith(s, at) for more in rest(at + len(s))]

    return rest(0)


@pytest.mark.parametrize("vocab_fixture", ["smollm2_vocab", "llama2_vocab",
                                           pytest.param("gemma_vocab", marks=pytest.mark.slow)])
def test_short_data_strings_enumerate_to_their_brute_force_tokenizations(request, vocab_fixture):
    vocab = request.getfixturevalue(vocab_fixture)
    words = {" " + w for t in _data_texts(3000) for w in t.split()[:2]} | {" Bird", " the", "é!"}
    for word in sorted(words, key=lambda w: (len(w), w))[:: max(1, len(words) // 30)]:
        truth = _brute_force_over(word.encode(), vocab)
        mdd = compile_mdd(word, vocab)
        assert sorted(mdd.enumerate()) == sorted(truth) and mdd.count() == len(truth) > 0


def test_networkx_owns_the_graph_once_read():
    import pickle

    vocab = Vocabulary.from_tokens(["a", "aa", "aaa"])
    mdd = compile_mdd("aaaa", vocab)
    copy = pickle.loads(pickle.dumps(mdd))  # the compiled lists travel
    assert "_out" in copy.__dict__ and copy.count() == 7
    assert mdd.number_of_edges() == copy.copy().number_of_edges() == 9 and "_out" not in mdd.__dict__
    assert mdd._succ is mdd._adj and mdd._succ[0][1] is mdd._pred[1][0]  # networkx's layout: one key dict
    mdd.remove_edge(0, 3, key=2)  # "aaa" first: a graph edited through networkx counts what networkx holds
    assert mdd.count() == 6 and (2, 0) not in mdd.sample(50, seed=0)
    assert list(mdd.enumerate()) == [p for p in copy.enumerate() if p != (2, 0)]
    assert list(copy.enumerate(start=3)) == [(0,)]
    with pytest.raises(ValueError, match="start 9 is not a node of the MDD"):
        next(copy.enumerate(start=9))
