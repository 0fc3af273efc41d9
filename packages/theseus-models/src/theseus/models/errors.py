"""Errors of theseus.models, each a one-line `TheseusError` naming the offending values."""

from theseus.core.errors import TheseusError


class ModelError(TheseusError):
    """A model was given input or config it cannot work with."""


class SequenceTooLongError(ModelError):
    """More tokens than the model's maximum positions."""


class VocabMismatchError(ModelError):
    """The tokenizer's vocabulary does not fit the model's."""


class CheckpointShapeError(ModelError):
    """A checkpoint's tensors do not fit the config."""


class UnsupportedArchitectureError(ModelError):
    """A Hugging Face architecture theseus cannot import."""
