"""Meshes, logical-axis rules and placement: one config picks dp, ZeRO-1, FSDP or TP.

``config`` and ``rules`` import no JAX (the CLI reads them); ``mesh``, ``placement``,
``memory`` and ``distributed`` do.
"""
