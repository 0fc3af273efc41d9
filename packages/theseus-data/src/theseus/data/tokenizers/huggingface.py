"""Tokenizers backed by Hugging Face ``tokenizers``: ``hf`` (a tokenizer.json) and ``bpe``."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from theseus.core.components import option
from theseus.data.errors import TokenizerError
from theseus.data.tokenizers.base import (
    EOS,
    PAD,
    SPECIAL_TOKENS,
    Corpus,
    Tokenizer,
    sha256_text,
    write_config,
)

log = logging.getLogger(__name__)
EOS_CANDIDATES = (EOS, "</s>", "<|end_of_text|>", "<eos>", "<|im_end|>")
PAD_CANDIDATES = (PAD, "<pad>", "[PAD]")


@dataclass
class HFConfig:
    path: str = option(help="a tokenizer.json file, or a Hugging Face hub id (needs network)")
    eos_token: str = option("", "end-of-document token (empty: detect </s>, <|endoftext|> ...)")


@dataclass
class BPEConfig:
    vocab_size: int = option(8192, "vocabulary size, special tokens included")
    min_frequency: int = option(2, "merge only pairs seen at least this often")
    train_bytes: int = option(50_000_000, "train on at most this many bytes of the corpus")


class HFTokenizer(Tokenizer):
    kind = "hf"

    def __init__(self, json_text: str, eos_token: str = "") -> None:
        from tokenizers import Tokenizer as RustTokenizer

        self.json_text = json_text
        self.tk = RustTokenizer.from_str(json_text)
        self.vocab_size = self.tk.get_vocab_size(with_added_tokens=True)
        eos = self._find([eos_token] if eos_token else list(EOS_CANDIDATES))
        if eos is None:
            wanted = eos_token or " or ".join(EOS_CANDIDATES)
            raise TokenizerError(f"the tokenizer has no end-of-document token {wanted}")
        self.eos_token = eos
        self.eos_id = self.tk.token_to_id(eos)
        pad = self._find(list(PAD_CANDIDATES))
        self.pad_id = self.tk.token_to_id(pad) if pad else self.eos_id

    def _find(self, tokens: list[str]) -> str | None:
        return next((t for t in tokens if self.tk.token_to_id(t) is not None), None)

    @classmethod
    def create(cls, config: Any, corpus: Corpus) -> HFTokenizer:
        path = Path(config.path).expanduser()
        if path.is_dir():
            path = path / "tokenizer.json"
        if path.is_file():
            return cls(path.read_text(), config.eos_token)
        if "/" in config.path and not config.path.startswith((".", "/")):
            return cls(_from_hub(config.path), config.eos_token)
        raise TokenizerError(f"tokenizer.path {config.path!r}: no such tokenizer.json file")

    @classmethod
    def load(cls, directory: Path) -> HFTokenizer:
        from theseus.data.tokenizers.base import read_config

        saved = read_config(directory)
        return cls((Path(directory) / "tokenizer.json").read_text(), saved.get("eos_token", ""))

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "tokenizer.json").write_text(self.json_text)
        write_config(directory, {"kind": self.kind, "eos_token": self.eos_token})

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tk.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tk.decode([int(i) for i in ids], skip_special_tokens=False)

    def special_id(self, token: str) -> int | None:
        return self.tk.token_to_id(token)

    def fingerprint(self) -> str:
        return sha256_text(self.json_text)


def _from_hub(name: str) -> str:
    from tokenizers import Tokenizer as RustTokenizer

    try:
        return RustTokenizer.from_pretrained(name).to_str()
    except Exception as error:
        raise TokenizerError(
            f"tokenizer.path {name!r}: could not fetch it from the Hugging Face hub (needs "
            f"network access; give a local tokenizer.json instead): {str(error).splitlines()[0]}"
        ) from error


class BPETokenizer(HFTokenizer):
    """Byte-level BPE trained on the dataset being tokenized (deterministic)."""

    kind = "bpe"

    @classmethod
    def create(cls, config: Any, corpus: Corpus) -> BPETokenizer:
        from tokenizers import Tokenizer as RustTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        vocab_size = config.vocab_size
        minimum = 256 + len(SPECIAL_TOKENS)
        if vocab_size < minimum:
            raise TokenizerError(f"tokenizer.vocab_size is {vocab_size}; bpe needs >= {minimum}")
        tk = RustTokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=config.min_frequency,
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        log.info("training a byte-level BPE tokenizer (vocab %d)", vocab_size)
        tk.train_from_iterator(_limited(corpus(), config.train_bytes), trainer)
        return cls(tk.to_str())


def _limited(texts: Iterator[str], limit: int) -> Iterator[str]:
    used = 0
    for text in texts:
        if used >= limit:
            return
        yield text
        used += len(text.encode("utf-8"))
