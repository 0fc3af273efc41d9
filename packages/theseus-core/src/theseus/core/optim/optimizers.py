"""Built-in optimizers: each ``build(config, learning_rate) -> optax.GradientTransformation``.

``learning_rate`` is a schedule (step -> rate). Gradient clipping by global norm
(``grad_clip``) and the placement of the state are added by
``theseus.core.optim.build.build_optimizer``, for these and for plugin optimizers alike.
Every built-in applies ``weight_decay`` itself (their configs set ``applies_weight_decay``),
decoupled and multiplied by the learning rate (AdamW's convention: a step shrinks a matrix by
``lr * weight_decay``); SGD adds it to the gradient before the momentum (PyTorch's
convention).

Which parameters are *matrices* (weight decay; Muon's orthogonalized update) is read from
each parameter's logical axis names (the ``out_sharding`` metadata models give their
``nnx.Param``\\ s), because a leaf's ``ndim`` says little here: the decoder stacks every
block's parameters on a leading ``layers`` axis (a LayerNorm gain is L x D), attention
kernels keep heads apart (D x H x K) and attention biases are H x K. The rules:

* leading ``layers`` and ``experts`` axes are stacks of independent copies, not matrix axes;
* a leaf named ``bias`` or ``scale`` (norm gains) is never a matrix;
* any other leaf with two or more axes left is one: its reduction (input) axes are the
  ``embed`` axis when that comes first, else all but a trailing ``embed`` axis (so
  ``embed -> heads x head_dim`` and ``heads x head_dim -> embed`` both read right).

A plain array without axis names counts as a matrix when it has two or more dimensions (its
last two; leading ones are a stack) and is not named ``bias`` or ``scale``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax
from flax import nnx
from theseus.core.errors import PluginError

STACKED_AXES = ("layers", "experts")
NEVER_MATRICES = ("bias", "scale")


def matrix_axes(name: str, shape: tuple[int, ...], axes: Any) -> tuple[tuple, tuple] | None:
    """``(reduction axes, output axes)`` of a matrix parameter (or stack of them), else None."""
    if name in NEVER_MATRICES:
        return None
    ndim = len(shape)
    if axes is None or len(axes) != ndim:
        return ((ndim - 2,), (ndim - 1,)) if ndim >= 2 else None
    first = 0
    while first < ndim and axes[first] in STACKED_AXES:
        first += 1
    inner = tuple(range(first, ndim))
    if len(inner) < 2:
        return None
    if axes[inner[0]] != "embed" and axes[inner[-1]] == "embed":
        return inner[:-1], inner[-1:]
    return inner[:1], inner[1:]


def is_embedding(name: str, axes: Any) -> bool:
    """Token/position embeddings and an untied output head (their axes name ``vocab``)."""
    return name == "embedding" or (axes is not None and "vocab" in axes)


def map_parameters(fn: Callable[[str, tuple, Any], Any], tree: Any) -> Any:
    """``fn(name, shape, axes)`` for every parameter, in a tree shaped like ``tree``.

    ``name`` is the last key of the parameter's path; ``axes`` its logical axis names when it
    is an ``nnx.Variable`` carrying them (None otherwise). Works on params, gradients and
    updates alike (Optax masks are computed from the updates), and on Optax's partitions of
    them (``MaskedNode`` subtrees have no leaves and are kept as they are).
    """

    def visit(path: tuple, node: Any) -> Any:
        name = _last_name(path)
        if _is_variable(node):
            axes = node.get_metadata().get("out_sharding")
            return jax.tree.map(lambda leaf: fn(name, tuple(leaf.shape), axes), node)
        return fn(name, tuple(node.shape), None)

    return jax.tree_util.tree_map_with_path(visit, tree, is_leaf=_is_variable)


def _is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def _last_name(path: tuple) -> str:
    for key in reversed(path):
        for attribute in ("key", "name"):
            value = getattr(key, attribute, None)
            if isinstance(value, str):
                return value
    return ""


def decay_mask(params: Any) -> Any:
    """True for the parameters that get weight decay: matrices (embeddings included).

    A tree shaped like ``params`` (params, gradients or updates; ``nnx.State`` or plain
    arrays) of Python bools, read from each leaf's name and logical axis names as this
    module's docstring says: pass it (or the function itself) as an Optax ``mask``.
    """
    return map_parameters(
        lambda name, shape, axes: matrix_axes(name, shape, axes) is not None, params
    )


def muon_dimensions(params: Any) -> Any:
    """Muon's dimension numbers for the hidden matrices; None (AdamW) for everything else.

    Embeddings and an untied output head go to AdamW too, as Muon's authors recommend.
    """
    muon_dims = optax.contrib.MuonDimensionNumbers

    def dims(name: str, shape: tuple, axes: Any) -> Any:
        split = matrix_axes(name, shape, axes)
        if split is None or is_embedding(name, axes):
            return None
        return muon_dims(reduction_axis=split[0], output_axis=split[1])

    return map_parameters(dims, params)


def placeable_state(inner: optax.GradientTransformation) -> optax.GradientTransformation:
    """``inner`` with no optimizer-state ``nnx.Variable`` whose axis names misdescribe it.

    Optax builds its state by mapping over the params, so state leaves keep each parameter's
    ``nnx.Param`` wrapper and logical axis names, which is how the sharding layout places
    them (ZeRO, FSDP). Two kinds of leaf keep a wrapper that does not fit: masked-out entries
    (``Param(MaskedNode())``: Muon's partition) and statistics of another shape than their
    parameter (Adafactor's factored rows and columns and its ``(1,)`` placeholders). Those
    leave the state unwrapped here: a bare ``MaskedNode`` (nothing to place) and plain arrays
    (replicated; they are small). Each update rewraps the state the way ``inner`` made it,
    so ``inner`` never sees the difference.
    """

    def init(params: Any) -> Any:
        return _unwrap_misfits(inner.init(params), params)

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        made = jax.tree.structure(jax.eval_shape(inner.init, updates))
        state = jax.tree.unflatten(made, jax.tree.leaves(state))
        updates_out, state = inner.update(updates, state, params)
        return updates_out, _unwrap_misfits(state, updates)

    return optax.GradientTransformation(init, update)


def _unwrap_misfits(state: Any, params: Any) -> Any:
    """The state with every Variable that does not hold an array of its parameter's shape
    (the parameter whose path ends the leaf's path) replaced by its value."""
    flat = jax.tree_util.tree_flatten_with_path(params, is_leaf=_is_variable)[0]
    shapes = {path: tuple(leaf.get_value().shape) for path, leaf in flat if _is_variable(leaf)}

    def visit(path: tuple, node: Any) -> Any:
        if not _is_variable(node):
            return node
        value = node.get_value()
        if not hasattr(value, "shape"):  # MaskedNode
            return value
        for start in range(len(path)):
            if path[start:] in shapes:
                return node if shapes[path[start:]] == tuple(value.shape) else value
        axes = node.get_metadata().get("out_sharding")
        return node if axes is None or len(axes) == value.ndim else value

    return jax.tree_util.tree_map_with_path(visit, state, is_leaf=_is_variable)


def adamw(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    return optax.adamw(
        learning_rate,
        b1=config.b1,
        b2=config.b2,
        eps=config.eps,
        weight_decay=config.weight_decay,
        mask=decay_mask,
    )


def lion(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    return optax.lion(
        learning_rate,
        b1=config.b1,
        b2=config.b2,
        weight_decay=config.weight_decay,
        mask=decay_mask,
    )


def sgd(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    momentum = config.momentum if config.momentum > 0 else None
    parts = []
    if config.weight_decay:
        parts.append(optax.add_decayed_weights(config.weight_decay, mask=decay_mask))
    parts.append(optax.sgd(learning_rate, momentum=momentum, nesterov=config.nesterov))
    return optax.chain(*parts)


def adafactor(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    weight_decay = config.weight_decay

    def decay_rate(step: Any) -> Any:  # Optax's Adafactor decay is absolute: scale it by lr
        return weight_decay * learning_rate(step)

    return optax.adafactor(
        learning_rate,
        decay_rate=config.decay_rate,
        clipping_threshold=config.clipping_threshold,
        weight_decay_rate=decay_rate if weight_decay else None,
        weight_decay_mask=decay_mask,
    )


def muon(config: Any, learning_rate: optax.Schedule) -> optax.GradientTransformation:
    """Muon on the hidden matrices, AdamW (at ``adam_learning_rate``, no decay) on the rest."""
    contrib = getattr(optax, "contrib", None)
    muon_fn = getattr(contrib, "muon", None)
    if muon_fn is None:  # pragma: no cover - depends on the optax version
        raise PluginError(
            f"optimizer 'muon' needs optax.contrib.muon (optax {optax.__version__} lacks it)"
        )
    ratio = config.adam_learning_rate / config.learning_rate if config.learning_rate else 0.0

    def adam_rate(step: Any) -> Any:
        return learning_rate(step) * ratio

    return muon_fn(
        learning_rate,
        ns_steps=config.ns_steps,
        beta=config.beta,
        weight_decay=config.weight_decay,
        weight_decay_mask=decay_mask,
        adam_learning_rate=adam_rate,
        muon_weight_dimension_numbers=muon_dimensions,
    )
