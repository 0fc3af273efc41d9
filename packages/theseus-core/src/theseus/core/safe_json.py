"""JSON read with a bound on nesting: the files a user, a tool or a download wrote
(``config.json``, tokenizer files, ``job.json``, jsonl corpora) go through :func:`loads`.

Python's decoder recurses once per nested array or object, so a document nested deeper
than the interpreter's recursion limit (a few hundred bytes of ``[[[[...``) ends in a
``RecursionError`` traceback. :func:`loads` turns that into a :class:`JSONDepthError`, a
``json.JSONDecodeError``, so each caller's one-line "not valid JSON" message covers it.
"""

from __future__ import annotations

import json
from typing import Any


class JSONDepthError(json.JSONDecodeError):
    """A JSON document nested deeper than the decoder can follow."""


def loads(data: str | bytes | bytearray) -> Any:
    """``json.loads(data)``; a document nested too deep raises :class:`JSONDepthError`."""
    try:
        return json.loads(data)
    except RecursionError as error:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8", errors="replace")
        raise JSONDepthError(
            "arrays or objects nested deeper than the decoder can follow",
            text,
            0,
        ) from error
