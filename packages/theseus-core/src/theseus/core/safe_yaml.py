"""YAML read with bounds: every YAML file theseus reads goes through :func:`load`.

A safe loader still expands aliases: ten nested anchors of ten aliases each (a
"billion laughs" document) are a few hundred bytes of text that become 10^9 values once
anything walks them (OmegaConf, a JSON answer, a diff), and the reader hangs. PyYAML
composes an alias as a reference to the anchored node, so the document itself is cheap to
compose; its *expanded* size is counted here, node by node with each shared node counted
once per use, before anything is constructed. A document over the bounds, nested deeper
than :data:`MAX_DEPTH`, or holding a recursive alias is refused with a :class:`YAMLLimitError`
(a ``yaml.YAMLError``, so every caller's one-line YAML message covers it).

The bounds are far above any config (a full training config is a few hundred values).
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_TEXT_BYTES = 16 * 1024 * 1024  # a config file (or a saved config) larger than this is refused
MAX_NODES = 100_000  # values, keys and collections, aliases expanded
MAX_SCALAR_CHARS = 16 * 1024 * 1024  # characters of all scalars, aliases expanded
MAX_DEPTH = 200  # collections nested in collections


class YAMLLimitError(yaml.YAMLError):
    """A YAML document over the bounds above (``problem`` says which, in one line)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expanded_size(root: yaml.Node) -> tuple[int, int]:
    """(nodes, scalar characters) of ``root`` with every alias expanded, computed once per
    distinct node (so the count itself stays linear in the text); raises
    :class:`YAMLLimitError` as soon as a bound is passed, on a recursive alias, or when
    collections nest deeper than :data:`MAX_DEPTH`."""
    sizes: dict[int, tuple[int, int]] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            nodes, chars = 1, 0
            for child in _children(node):
                child_nodes, child_chars = sizes[id(child)]
                nodes, chars = nodes + child_nodes, chars + child_chars
            _check(nodes, chars)
            sizes[key] = (nodes, chars)
            continue
        if key in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = (1, len(node.value))
            continue
        if key in open_nodes:
            raise YAMLLimitError("an alias refers to a collection that contains it (recursive)")
        open_nodes.add(key)
        if len(open_nodes) > MAX_DEPTH:
            raise YAMLLimitError(f"collections are nested more than {MAX_DEPTH} deep")
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(_children(node)))
    return sizes[id(root)]


def _check(nodes: int, chars: int) -> None:
    if nodes > MAX_NODES:
        raise YAMLLimitError(
            f"the document expands to more than {MAX_NODES:,} values once its aliases are "
            "followed (an alias bomb?)"
        )
    if chars > MAX_SCALAR_CHARS:
        raise YAMLLimitError(
            f"the document expands to more than {MAX_SCALAR_CHARS // (1024 * 1024)} MiB of "
            "text once its aliases are followed (an alias bomb?)"
        )


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a document over the bounds before constructing it."""

    def compose_document(self) -> Any:
        try:
            node = super().compose_document()
        except RecursionError as error:
            raise YAMLLimitError("collections are nested too deeply") from error
        if node is not None:
            expanded_size(node)
        return node


def load(text: str | bytes, loader: type[BoundedLoader] = BoundedLoader) -> Any:
    """One YAML document, safely and within the bounds (``yaml.YAMLError`` otherwise)."""
    if len(text) > MAX_TEXT_BYTES:
        raise YAMLLimitError(
            f"the text is {len(text) / (1024 * 1024):.0f} MiB; YAML read here is at most "
            f"{MAX_TEXT_BYTES // (1024 * 1024)} MiB"
        )
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError as error:
        raise YAMLLimitError("collections are nested too deeply") from error


def problem(error: yaml.YAMLError) -> str:
    """A YAML error as one line: ``<problem> at line N``."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    text = getattr(error, "problem", None) or " ".join(str(error).split()) or type(error).__name__
    return f"{text}{where}"
