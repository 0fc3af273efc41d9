"""The valid range of a numeric config option, declared in its schema with ``option(...)``.

``option(3e-4, "peak learning rate", gt=0)`` stores a :class:`Range` in the field's
metadata; the config tree checks every value set against it (``optimizer.learning_rate=-1``
is refused in one line before anything runs) and ``theseus config`` shows it beside the type.
A float with a range must also be finite: ``nan`` and ``inf`` are never a learning rate.

Every number must also be one the step can compute with (:func:`computable_problem`): an
integer within a signed 64-bit integer (what numpy and JAX take), and one that sizes the
step's arrays (every ``model.*`` integer, the batch and the sequence: :data:`SHAPE_KEYS`)
within a signed 32-bit one; a float within float32's range. A limit derived from other
values (an expert's capacity from the number of experts) is checked where those values
meet, with :func:`check_at_most`, in one line naming the key.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from theseus.core.errors import ConfigError

HOST_INT_MAX = 2**63 - 1  # numpy and JAX take no larger integer
STEP_INT_MAX = 2**31 - 1  # the step's array sizes and indices are 32-bit
FLOAT32_MAX = 3.4028234663852886e38  # the step computes in float32 (or narrower)
SHAPE_KEYS = (
    "model.", "training.seq_len", "training.global_batch_size",
    "training.per_device_batch_size", "lora.rank",
)  # fmt: skip


def computable_problem(key: str, value: Any) -> str | None:
    """Why the number ``value`` of ``key`` is beyond what the step computes with (one
    phrase), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float):
        if math.isfinite(value) and abs(value) > FLOAT32_MAX:
            return f"must be at most {FLOAT32_MAX:.7g} in size, the largest float32 (the step's)"
        return None
    if key.startswith(SHAPE_KEYS) and abs(value) > STEP_INT_MAX:
        return f"must be at most {STEP_INT_MAX}: it sizes the step's arrays, whose sizes are 32-bit"
    if abs(value) > HOST_INT_MAX:
        return f"must be at most {HOST_INT_MAX} in size, the largest 64-bit integer"
    return None


def check_at_most(key: str, value: float, limit: float, why: str) -> None:
    """Refuse, in one line naming ``key``, a ``value`` above a ``limit`` derived from other
    values (``why``: what the limit is)."""
    if value > limit:
        raise ConfigError(f"{key}={_show(value)}: must be at most {_number(limit)} ({why})")


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(float(bound))


@dataclass(frozen=True)
class Range:
    """``ge <= x``, ``gt < x``, ``x <= le``, ``x < lt`` (each optional); all None: any finite
    number."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def __post_init__(self) -> None:
        if self.ge is not None and self.gt is not None:
            raise ValueError("a range takes ge or gt, not both")
        if self.le is not None and self.lt is not None:
            raise ValueError("a range takes le or lt, not both")

    @property
    def low(self) -> float | None:
        return self.ge if self.ge is not None else self.gt

    @property
    def high(self) -> float | None:
        return self.le if self.le is not None else self.lt

    def interval(self) -> str:
        """``[1, inf)``, ``(0, 1]``, ``(-inf, inf)``: what ``theseus config`` shows."""
        left = "[" if self.ge is not None else "("
        right = "]" if self.le is not None else ")"
        low = _number(self.low) if self.low is not None else "-inf"
        high = _number(self.high) if self.high is not None else "inf"
        return f"{left}{low}, {high}{right}"

    def phrase(self) -> str:
        """The range in words, for error messages: ``at least 1``, ``in [0, 1)``."""
        high = self.high
        if high is None:
            if self.ge is not None:
                return "0 or more" if self.ge == 0 else f"at least {_number(self.ge)}"
            if self.gt is not None:
                return f"greater than {_number(self.gt)}"
            return "a finite number"
        if self.low is None:
            return (
                f"at most {_number(high)}" if self.le is not None else f"less than {_number(high)}"
            )
        return f"in {self.interval()}"

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is outside the range (one phrase), or None when it is valid."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None  # the type check names wrong types
        if isinstance(value, float) and not math.isfinite(value):
            shown = self.phrase()
            return "must be a finite number" + ("" if shown == "a finite number" else f" {shown}")
        below = (self.ge is not None and value < self.ge) or (
            self.gt is not None and value <= self.gt
        )
        above = (self.le is not None and value > self.le) or (
            self.lt is not None and value >= self.lt
        )
        return f"must be {self.phrase()}" if below or above else None


def range_of(field_metadata: Any) -> Range | None:
    """The :class:`Range` a dataclass field declares (None: none declared)."""
    found = field_metadata.get("range") if field_metadata else None
    return found if isinstance(found, Range) else None


def choices_of(field_metadata: Any) -> tuple[str, ...]:
    """The values a string field declares it may take (empty: any)."""
    found = field_metadata.get("choices") if field_metadata else None
    return tuple(found) if found else ()


def check_value(key: str, value: Any, field_metadata: Any) -> str | None:
    """``"KEY=VALUE: must be ..."`` when ``value`` is outside the field's range, beyond what
    the step computes with, or not one of its choices; else None."""
    values = value if isinstance(value, list) else [value]  # list[int]: every item
    choices = choices_of(field_metadata)
    if choices:
        for item in values:
            if isinstance(item, str) and item not in choices:
                shown = ", ".join(choice or "''" for choice in choices)
                return f"{key}={item!r}: expected one of {shown}"
    declared = range_of(field_metadata)
    for item in values:
        problem = declared.problem(item) if declared is not None else None
        problem = problem or computable_problem(key, item)
        if problem is not None:
            return f"{key}={_show(item)}: {problem}"
    return None


def _show(value: Any) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return str(value)


def first_problem(config: Any, prefix: str, ranges: bool = True) -> str | None:
    """The first field of the dataclass ``config`` (nested ones too) outside its range or
    its choices (``ranges=False``: its choices only), as ``check_value`` words it; None when
    every field is valid."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        return None
    for found in dataclasses.fields(config):
        value = getattr(config, found.name, None)
        key = f"{prefix}.{found.name}"
        metadata = found.metadata if ranges else {"choices": choices_of(found.metadata)}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            problem = first_problem(value, key, ranges)
        else:
            problem = check_value(key, value, metadata)
        if problem is not None:
            return problem
    return None


def check_config(config: Any, prefix: str) -> None:
    """Every field of the dataclass ``config`` (nested ones too) within its range and its
    choices; ``ConfigError`` naming the first that is not. Each config checks itself once,
    when it is built (by the tree or in Python)."""
    problem = first_problem(config, prefix)
    if problem is not None:
        raise ConfigError(problem)
