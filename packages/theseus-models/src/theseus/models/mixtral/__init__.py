"""Mixtral: Mistral attention; every block's MLP is a top-2 softmax-routed mixture of experts."""

from theseus.models.mixtral.config import FAMILY

__all__ = ["FAMILY"]
