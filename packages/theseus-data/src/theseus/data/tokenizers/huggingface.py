"""Tokenizers backed by Hugging Face ``tokenizers``: ``hf`` (a tokenizer.json) and ``bpe``.

An ``hf`` tokenizer read from a folder also takes the folder's chat template
(``chat_template.jinja``, else ``chat_template`` in ``tokenizer_config.json``) and the special
tokens the template may use (``bos_token``, ``eos_token``, ...); it saves both with itself, so
the tokenize workers and later jobs render chats the same way (``theseus.data.tokenizers.chat_template``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from theseus.core import safe_json
from theseus.core.components import option
from theseus.data.errors import TokenizerError
from theseus.data.tokenizers.base import (
    CONFIG_FILE,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    Corpus,
    Tokenizer,
    read_config,
    sha256_text,
    write_config,
)

log = logging.getLogger(__name__)
EOS_CANDIDATES = (EOS, "</s>", "<|end_of_text|>", "<eos>", "<|im_end|>")
PAD_CANDIDATES = (PAD, "<pad>", "[PAD]")
CHAT_TEMPLATE_FILE = "chat_template.jinja"
LEGACY_SPECIAL_TOKENS_FILE = "special_tokens_map.json"
# The special tokens transformers hands a chat template as variables.
TEMPLATE_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


@dataclass
class HFConfig:
    path: str = option(help="a tokenizer.json file, or a Hugging Face hub id (needs network)")
    eos_token: str = option("", "end-of-document token (empty: detect </s>, <|endoftext|> ...)")


@dataclass
class BPEConfig:
    vocab_size: int = option(8192, "vocabulary size, special tokens included", ge=1)
    min_frequency: int = option(2, "merge only pairs seen at least this often", ge=1)
    train_bytes: int = option(50_000_000, "train on at most this many bytes of the corpus", ge=1)


class HFTokenizer(Tokenizer):
    kind = "hf"

    def __init__(
        self,
        json_text: str,
        eos_token: str = "",
        chat_template: str | None = None,
        chat_tokens: dict[str, str] | None = None,
        *,
        fast: bool = True,
    ) -> None:
        """``fast=False``: always encode with ``tokenizers`` (benchmarks, equivalence tests)."""
        from tokenizers import Tokenizer as RustTokenizer

        self.json_text = json_text
        self.tk = RustTokenizer.from_str(json_text)
        self._allow_fast = fast
        self.chat_template = chat_template or None
        self.chat_tokens = dict(chat_tokens or {})
        self.special_ids = frozenset(
            i for i, token in self.tk.get_added_tokens_decoder().items() if token.special
        )
        self.vocab_size = self.tk.get_vocab_size(with_added_tokens=True)
        eos = self._find([eos_token] if eos_token else list(EOS_CANDIDATES))
        if eos is None:
            wanted = eos_token or " or ".join(EOS_CANDIDATES)
            raise TokenizerError(f"the tokenizer has no end-of-document token {wanted}")
        self.eos_token, self.eos_id = eos
        pad = self._find(list(PAD_CANDIDATES))
        self.pad_id = pad[1] if pad else self.eos_id

    def _find(self, tokens: list[str]) -> tuple[str, int] | None:
        """The first of ``tokens`` the vocabulary holds, with its id."""
        for token in tokens:
            if (found := self.tk.token_to_id(token)) is not None:
                return token, found
        return None

    @classmethod
    def create(cls, config: Any, corpus: Corpus) -> HFTokenizer:
        path = Path(config.path).expanduser()
        if path.is_dir():
            path = path / "tokenizer.json"
        if path.is_file():
            template, tokens = read_chat_template(path.parent)
            if template:
                digest = sha256_text(template)[:12]
                log.info(
                    "%s has a chat template (%s): chat data renders with it", path.parent, digest
                )
            else:
                log.info("%s has no chat template: chat data uses the built-in one", path.parent)
            return cls(path.read_text(), config.eos_token, template, tokens)
        if "/" in config.path and not config.path.startswith((".", "/")):
            return cls(_from_hub(config.path), config.eos_token)
        raise TokenizerError(f"tokenizer.path {config.path!r}: no such tokenizer.json file")

    @classmethod
    def load(cls, directory: Path) -> HFTokenizer:
        saved = read_config(directory)
        return cls(
            (Path(directory) / "tokenizer.json").read_text(),
            saved.get("eos_token", ""),
            saved.get("chat_template"),
            saved.get("chat_tokens"),
        )

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "tokenizer.json").write_text(self.json_text)
        config: dict[str, Any] = {"kind": self.kind, "eos_token": self.eos_token}
        if self.chat_template:
            config.update(chat_template=self.chat_template, chat_tokens=self.chat_tokens)
        write_config(directory, config)

    @property
    def fast_encoder(self) -> Any:
        """tiktoken encoding the same ids (:mod:`.fast_bpe`), or None where it would not."""
        if not hasattr(self, "_fast"):
            from theseus.data.tokenizers.fast_bpe import tiktoken_equivalent

            added = self.tk.get_added_tokens_decoder().values()
            self._added = frozenset(token.content for token in added)
            encoder, why = (
                tiktoken_equivalent(self.json_text) if self._allow_fast else (None, "fast=False")
            )
            self._fast: Any = encoder
            if self._fast is None:
                log.debug("encoding with tokenizers, not tiktoken: %s", why)
        return self._fast

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text (added tokens written in the text are matched, as
        ``tokenizers`` does); through tiktoken when it gives the same ids."""
        fast = self.fast_encoder
        if fast is not None:
            added = self._added
            return [fast.encode(t, allowed_special=added, disallowed_special=()) for t in texts]
        return [e.ids for e in self.tk.encode_batch(list(texts), add_special_tokens=False)]

    def encode_arrays(self, texts: Sequence[str]) -> list[np.ndarray]:
        fast = self.fast_encoder
        if fast is None:
            return super().encode_arrays(texts)
        added = self._added
        return [
            fast.encode_to_numpy(t, allowed_special=added, disallowed_special=()) for t in texts
        ]

    def encode_with_offsets(
        self, texts: Sequence[str]
    ) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Ids and each token's (start, end) character offsets (for chat loss masks)."""
        encoded = self.tk.encode_batch(list(texts), add_special_tokens=False)
        return [(e.ids, e.offsets) for e in encoded]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tk.decode([int(i) for i in ids], skip_special_tokens=False)

    def special_id(self, token: str) -> int | None:
        return self.tk.token_to_id(token)

    def fingerprint(self) -> str:
        return sha256_text(self.json_text)

    def describe(self) -> dict[str, Any]:
        """Adds ``chat_template``: ``"builtin"`` or the sha256 of the folder's template."""
        from theseus.data.tokenizers.chat_template import template_id

        return {**super().describe(), "chat_template": template_id(self)}


def read_chat_template(folder: Path) -> tuple[str | None, dict[str, str]]:
    """The chat template of a Hugging Face tokenizer folder (None without one) and the special
    tokens it sees, read as transformers reads them; a theseus-saved folder gives its own."""
    config = _read_json(folder / CONFIG_FILE)
    if isinstance(config.get("kind"), str):  # saved by theseus (a dataset's tokenizer/)
        return config.get("chat_template") or None, dict(config.get("chat_tokens") or {})
    template = config.get("chat_template")
    if (folder / CHAT_TEMPLATE_FILE).is_file():
        template = (folder / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    elif isinstance(template, list):  # named templates: [{name, template}, ...]
        template = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
    if isinstance(template, dict):
        if "default" not in template:
            raise TokenizerError(
                f"{folder / CONFIG_FILE} has named chat templates {sorted(map(str, template))} "
                "but none named 'default'"
            )
        template = template["default"]
    if template is not None and not isinstance(template, str):
        raise TokenizerError(f"{folder / CONFIG_FILE}: chat_template is not a string")
    values = dict(config)
    legacy = folder / LEGACY_SPECIAL_TOKENS_FILE
    if "added_tokens_decoder" not in config and legacy.is_file():
        values.update(_read_json(legacy))  # older folders: transformers lets it override
    tokens = {}
    for key in TEMPLATE_TOKENS:
        value = values.get(key)
        if isinstance(value, dict):  # a serialized AddedToken
            value = value.get("content")
        if isinstance(value, str):
            tokens[key] = value
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):  # model-specific named tokens (image_token, ...)
        tokens.update({k: v for k, v in extra.items() if isinstance(v, str)})
    return template or None, tokens


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = safe_json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise TokenizerError(f"{path} is not valid JSON: {error}") from error
    return data if isinstance(data, dict) else {}


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
