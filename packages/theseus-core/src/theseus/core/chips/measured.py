"""The figures measured on chips that the code reads, from one file: ``measured.json`` beside
this module (package data, under version control). Each section names the bench script that
measures it and writes it there (``bench/tpu_attention_sweep.py`` the splash blocks and
rates); tests/core/test_measured_figures.py checks the file against the bench's results.
No JAX.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

FILE = "measured.json"


@cache
def measured() -> dict[str, Any]:
    """The whole file, read once."""
    return json.loads(resources.files(__package__).joinpath(FILE).read_text())


def section(name: str) -> dict[str, Any]:
    """One table of the file (``splash_blocks``, ``splash_rates``, ``remat``)."""
    return measured()[name]
