"""Tokenization jobs: parallel, resumable, byte-identical whatever the worker count."""
