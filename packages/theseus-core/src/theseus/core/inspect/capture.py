"""Record the inputs and outputs of chosen modules during one eager forward pass.

A module is recorded by swapping its class for a subclass whose ``__call__`` stores the
arguments and the result, then swapping it back: the model's code is untouched. Blocks run
under a scan are called once for all layers, so recording uses the model's ``unrolled()``
form (see ``theseus.core.model.LanguageModel``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Capture:
    """What one module saw: positional args, keyword args and output, one entry per call."""

    path: str
    type: str
    calls: list[tuple[tuple, dict, Any]] = field(default_factory=list)

    @property
    def args(self) -> tuple:
        return self.calls[0][0]

    @property
    def kwargs(self) -> dict:
        return self.calls[0][1]

    @property
    def output(self) -> Any:
        return self.calls[0][2]


def module_paths(model: Any) -> dict[str, Any]:
    """Every submodule by dotted path (``blocks.3.attn``); the root is ``""``."""
    from flax import nnx

    paths = {}
    for path, module in nnx.iter_modules(model):
        paths[".".join(str(p) for p in path)] = module
    return paths


_recording_classes: dict[type, type] = {}


def _recording_class(cls: type) -> type:
    if cls not in _recording_classes:

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            output = cls.__call__(self, *args, **kwargs)
            self.__dict__["_theseus_capture"].calls.append((args, kwargs, output))
            return output

        _recording_classes[cls] = type(f"Recording{cls.__name__}", (cls,), {"__call__": __call__})
    return _recording_classes[cls]


@contextmanager
def recording(modules: dict[str, Any]) -> Iterator[dict[str, Capture]]:
    captures = {path: Capture(path, type(m).__name__) for path, m in modules.items()}
    originals = {}
    try:
        for path, module in modules.items():
            originals[path] = type(module)
            object.__setattr__(module, "__class__", _recording_class(type(module)))
            module.__dict__["_theseus_capture"] = captures[path]
        yield captures
    finally:
        for path, module in modules.items():
            if path in originals:
                object.__setattr__(module, "__class__", originals[path])
                module.__dict__.pop("_theseus_capture", None)
