"""Tokenizers: real HF tokenizers, tiktoken (offline cl100k_base) and bytes."""

from __future__ import annotations

import pytest
from theseus.data import load_tokenizer
from theseus.data.datasets.stdlib import stdlib_files
from theseus.data.errors import TokenizerError
from theseus.data.tokenizers.byte import ByteTokenizer
from theseus.data.tokenizers.huggingface import BPEConfig, BPETokenizer, HFConfig, HFTokenizer
from theseus.data.tokenizers.tiktoken_tokenizer import TiktokenConfig, TiktokenTokenizer

TEXT = "def f(x):\n    return x + 1  # héllo ✓\n"


def corpus():
    return (p.read_text() for p in stdlib_files()[:20])


def bpe_config(vocab_size: int = 400) -> BPEConfig:
    return BPEConfig(vocab_size=vocab_size, min_frequency=2, train_bytes=300_000)


def test_byte_roundtrip_and_specials(tmp_path):
    tok = ByteTokenizer()
    ids = tok.encode(TEXT)
    assert ids == list(TEXT.encode())
    assert tok.vocab_size == 262 and tok.eos_id == 256 and tok.pad_id == 257
    assert tok.decode(ids + [tok.eos_id]) == TEXT + "<|endoftext|>"
    tok.save(tmp_path / "tok")
    assert load_tokenizer(tmp_path / "tok").encode(TEXT) == ids


def test_bpe_is_deterministic_and_roundtrips(tmp_path):
    first = BPETokenizer.create(bpe_config(), corpus)
    second = BPETokenizer.create(bpe_config(), corpus)
    assert first.json_text == second.json_text
    assert first.vocab_size == 400
    assert first.eos_id == 0 and first.pad_id == 1  # special tokens come first
    ids = first.encode(TEXT)
    assert first.decode(ids) == TEXT
    assert len(ids) < len(TEXT.encode())  # merges learned
    first.save(tmp_path / "tok")
    loaded = load_tokenizer(tmp_path / "tok")
    assert isinstance(loaded, BPETokenizer) and loaded.encode(TEXT) == ids
    assert loaded.fingerprint() == first.fingerprint()


def test_bpe_vocab_too_small():
    with pytest.raises(TokenizerError, match="vocab_size is 100; bpe needs >= 262"):
        BPETokenizer.create(bpe_config(100), corpus)


def test_hf_tokenizer_json_file(tmp_path):
    bpe = BPETokenizer.create(bpe_config(), corpus)
    path = tmp_path / "tokenizer.json"
    path.write_text(bpe.json_text)
    hf = HFTokenizer.create(HFConfig(path=str(path)), corpus)
    assert hf.encode(TEXT) == bpe.encode(TEXT)
    assert hf.fingerprint() == bpe.fingerprint()  # same vocabulary, same fingerprint
    with pytest.raises(TokenizerError, match="no-such.json"):
        HFTokenizer.create(HFConfig(path=str(tmp_path / "no-such.json")), corpus)


def test_tiktoken_cl100k_offline(tmp_path):
    tok = TiktokenTokenizer.create(TiktokenConfig(encoding="cl100k_base"), corpus)
    assert tok.encode("hello world") == [15339, 1917]
    assert tok.vocab_size == 100277 and tok.eos_id == 100257
    assert tok.decode(tok.encode(TEXT)) == TEXT
    tok.save(tmp_path / "tok")
    assert load_tokenizer(tmp_path / "tok").encode("hello world") == [15339, 1917]


def test_tiktoken_other_encodings_say_they_need_network():
    with pytest.raises(TokenizerError, match="'gpt2' needs network access"):
        TiktokenTokenizer.create(TiktokenConfig(encoding="gpt2"), corpus)
    with pytest.raises(TokenizerError, match="'nope' is not a tiktoken encoding"):
        TiktokenTokenizer.create(TiktokenConfig(encoding="nope"), corpus)
