"""The parameter rules of the layout a step is being traced under.

``Layout.on_mesh`` traces a step with its mesh (``get_abstract_mesh``) and, here, its
strategy's parameter rules, so a layer that lays out a gradient itself (the embedding's
backward: resharded in the compute dtype before the float32 scatter) can ask how the layout
splits one of its parameters. Outside a traced step there are no rules: ``None``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from theseus.core.sharding.rules import Rules

_PARAM_RULES: ContextVar[Rules | None] = ContextVar("theseus_param_rules", default=None)


@contextmanager
def tracing_with(rules: Rules) -> Iterator[None]:
    """Within the block, ``param_rules()`` is ``rules``."""
    token = _PARAM_RULES.set(rules)
    try:
        yield
    finally:
        _PARAM_RULES.reset(token)


def param_rules() -> Rules | None:
    return _PARAM_RULES.get()
