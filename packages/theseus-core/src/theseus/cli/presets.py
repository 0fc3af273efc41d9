"""``theseus presets``: the size presets ``model.preset=NAME`` applies, per model."""

from __future__ import annotations

from typing import Any


def presets_table(registries: Any, model: str = "") -> Any:
    """Without ``model``: each model's preset names. With it: each of its presets and the
    ``model.*`` values it sets (the command line after it still applies)."""
    from rich.table import Table

    if not model:
        table = Table("model", "presets (model.preset=NAME)", box=None, pad_edge=False)
        for name, component in registries.models.items():
            names = ", ".join(component.extra.get("presets", {})) or "-"
            table.add_row(name, names)
        return table
    presets = registries.models.get(model).extra.get("presets", {})
    table = Table("preset", f"sets (theseus run {model}/train/pretrain model.preset=NAME)")
    table.box, table.pad_edge = None, False
    for preset, values in presets.items():
        table.add_row(preset, " ".join(f"{key}={value}" for key, value in values.items()))
    return table
