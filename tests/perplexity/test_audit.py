"""The byte-accounting audit: exact bytes, and tables that reproduce each public bug flagged with their cause.

Tables are built the way the public code builds them (parameter-golf #897: the leading-space marker not counted
without a standalone ``▁`` token, and a space counted twice; nanochat #693 / autoresearch #384: a token decoded
alone with replacement, U+FFFD = 3 bytes; byte pieces counted by their names; BOS counted by its name).
"""

import json
import math

import numpy as np
import pytest
import torch

from conftest import SHARED
from ppl_tok.cli.main import main
from ppl_tok.lm.cards import load_vocabulary
from ppl_tok.perplexity.audit import audit_bytes, cause_of, exact_byte_table, read_byte_table
from ppl_tok.vocabulary import Vocabulary

LLAMA2 = SHARED / "tokenizers" / "llama2" / "tokenizer.model"
STEMS = [json.loads(line)["question"]["stem"] for line in (SHARED / "data" / "openbookqa" / "test.jsonl")
         .read_text().splitlines()[:40]]
CORPUS = STEMS + ["Café au lait, naïve coöperation.", "Emoji 🦜 and 𝔘nicode ☃ mixed in.", "日本語のテキスト"]


def space_dropped(vocab):  # parameter-golf #897: no standalone "▁" token carries the space
    return [n - 1 if s and s.startswith(b" ") else n for s, n in zip(vocab.surfaces, exact_byte_table(vocab))]


def space_twice(vocab):  # the record submissions closed over a double-counted space
    return [n + 1 if s and s.startswith(b" ") else n for s, n in zip(vocab.surfaces, exact_byte_table(vocab))]


def decoded_alone(vocab):  # nanochat #693, autoresearch #384: len(token.decode("utf-8", "replace").encode())
    return [0 if s is None else len(s.decode("utf-8", "replace").encode()) for s in vocab.surfaces]


def by_name(vocab):  # byte pieces and special tokens counted by their names ("<0xF0>": 6, "<s>": 3)
    return [len(vocab.token_name(i).replace("\u2581", " ").encode()) for i in range(len(vocab))]


@pytest.fixture(scope="module")
def llama2():
    return Vocabulary.from_sentencepiece(LLAMA2)


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def bundled(request):
    return load_vocabulary(request.param)


def test_exact_bytes_and_the_correct_table_agree_to_the_byte(llama2, bundled):
    for vocab in (llama2, bundled):
        audit = audit_bytes(vocab, CORPUS, exact_byte_table(vocab), bos_id=1)
        assert audit.exact_bytes == sum(len(t.encode()) for t in CORPUS)
        assert audit.claimed_bytes == audit.exact_bytes and not audit.flagged and audit.by_cause == {}


def test_llama2_tables_with_the_public_bugs_are_flagged_with_their_cause(llama2):
    exact = sum(len(t.encode()) for t in CORPUS)
    audit = audit_bytes(llama2, CORPUS, space_dropped(llama2))
    words = sum(len(t.split()) - 1 for t in CORPUS)  # literal encoding: every word but the first has "▁"
    assert audit.flagged and set(audit.by_cause) == {"leading-space"}
    assert audit.by_cause["leading-space"] == audit.claimed_bytes - exact and -audit.by_cause["leading-space"] >= words
    assert 0.12 < -audit.by_cause["leading-space"] / exact < 0.25  # the ~20% undercount
    audit = audit_bytes(llama2, CORPUS, space_twice(llama2))
    assert audit.flagged and audit.by_cause == {"leading-space": audit.claimed_bytes - exact}
    audit = audit_bytes(llama2, CORPUS, by_name(llama2), bos_id=1)
    assert audit.flagged and set(audit.by_cause) == {"byte-fallback", "special"}
    assert audit.by_cause["special"] == 3 * len(CORPUS)  # "<s>" per document
    assert audit.examples["byte-fallback"][0][1:] == (6, 1)
    assert sum(audit.by_cause.values()) == audit.claimed_bytes - exact
    audit = audit_bytes(llama2, CORPUS, decoded_alone(llama2))
    assert audit.flagged and set(audit.by_cause) == {"byte-fallback"}  # Llama 2's partial characters: byte pieces


def test_partial_characters_decoded_alone_are_flagged(bundled):
    """SmolLM2 (byte-level BPE) splits a rare character into tokens that are not UTF-8 alone; Gemma 3 spells it
    in byte pieces: the same bug, filed under the token's kind."""
    exact = sum(len(t.encode()) for t in CORPUS)
    audit = audit_bytes(bundled, CORPUS, decoded_alone(bundled))
    cause = "byte-fallback" if bundled.byte_fallback_ids else "partial-utf8"
    assert audit.flagged and list(audit.by_cause) == [cause] and audit.by_cause[cause] > 0
    assert sum(audit.by_cause.values()) == audit.claimed_bytes - exact
    assert all(1 <= true < claimed == 3 for _, claimed, true in audit.examples[cause])


def test_causes_and_bits_per_byte_on_a_toy():
    from qa_toy import toy_lm

    lm = toy_lm(2)
    vocab = lm.vocab
    assert [cause_of(vocab, i) for i in (0, 1, 10)] == ["special", "leading-space", "leading-space"]
    texts = ["ab cd", " abc de"]
    audit = audit_bytes(vocab, texts, space_dropped(vocab), lm=lm)
    nats = -sum(lm.canonical_log_prob(t) for t in texts)
    assert audit.bits_per_byte == pytest.approx(nats / math.log(2) / 12, abs=1e-12)
    assert audit.claimed_bits_per_byte == pytest.approx(nats / math.log(2) / audit.claimed_bytes, abs=1e-12)
    assert audit.claimed_bytes < 12 and audit.claimed_bits_per_byte > audit.bits_per_byte


def test_tables_read_in_the_shapes_repositories_use(tmp_path, llama2):
    table = exact_byte_table(llama2)
    np.save(tmp_path / "t.npy", np.array(table, dtype=np.int32))
    torch.save(torch.tensor(table, dtype=torch.int64), tmp_path / "t.pt")
    (tmp_path / "t.json").write_text(json.dumps(table))
    (tmp_path / "o.json").write_text(json.dumps({"bytes": table}))
    for name in ("t.npy", "t.pt", "t.json", "o.json"):
        assert read_byte_table(tmp_path / name, len(llama2)) == table
    with pytest.raises(ValueError, match="32000 entries for a vocabulary of 5"):
        read_byte_table(tmp_path / "t.json", 5)
    (tmp_path / "bad.json").write_text("[1, -2]")
    with pytest.raises(ValueError, match=r"bad.json: entry 1 \(token id 1\) is -2; each entry must be a whole number"):
        read_byte_table(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="cannot read it"):
        read_byte_table(tmp_path / "missing.json")


def test_the_command(tmp_path, capsys, llama2):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    table = tmp_path / "t.json"
    table.write_text(json.dumps(space_dropped(llama2)))
    assert main(["byte-audit", str(corpus), "--split", "lines", "--tokenizer", str(LLAMA2), "--table", str(table),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exact_bytes"] == sum(len(t.encode()) for t in CORPUS) and out["flagged"]
    assert list(out["by_cause"]) == ["leading-space"] and out["difference"] == out["by_cause"]["leading-space"]
    assert main(["byte-audit", str(corpus), "--split", "lines", "--tokenizer", str(LLAMA2), "--table", str(table)]) == 0
    assert "FLAGGED" in capsys.readouterr().out
    table.write_text("[1, 2]")
    assert main(["byte-audit", str(corpus), "--tokenizer", str(LLAMA2), "--table", str(table)]) == 2
    assert "2 entries for a vocabulary of 32000" in capsys.readouterr().err
