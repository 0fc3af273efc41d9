"""Gemma 3 (text): local sliding-window and global layers, sandwich norms, GeGLU, scaled embeddings."""

from theseus.models.gemma3.config import FAMILY

__all__ = ["FAMILY"]
