"""Tokenizers: ``bpe``, ``hf``, ``tiktoken`` and ``byte``, and loading a saved one."""

from theseus.data.tokenizers.load import create_tokenizer, find_tokenizer, load_tokenizer

__all__ = ["create_tokenizer", "find_tokenizer", "load_tokenizer"]
