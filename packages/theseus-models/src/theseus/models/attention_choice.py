"""Which attention implementation runs: ``model.attention`` resolved for a chip and a length.

Cheap to import (no JAX). A training setup asks it once, for the platform and chip of its
mesh's devices (``tpu`` for compile-only TPU devices, whatever ``jax.default_backend()``
says) and the ways its heads are split, and puts the answer in the run's execution plan,
which the model is built with::

    model.choose_attention(seq_len, "tpu", "TPU v5", head_shards=2)

A model built without a plan runs ``model.attention`` as named (``reference`` for ``auto``).

* ``reference``: the stages ``scores -> mask -> weights -> combine``: every score is
  materialised (memory quadratic in the length); any stage can be overridden.
* ``flash``: blockwise online softmax in pure JAX (``layers/flash.py``), memory linear in
  the length, every backend and every sharding.
* ``cudnn``: ``jax.nn.dot_product_attention(implementation="cudnn")``, NVIDIA GPUs, bf16/fp16,
  head_dim a multiple of 8 up to 128 (XLA:GPU refuses more with a mask, H100 and B200 alike).
* ``splash``: the Pallas TPU splash-attention kernel (a Pallas interpreter elsewhere, for
  tests). It compiles on v5p, v5e and v6e for every head_dim tried (8 to 256) in bf16 and f32.
* ``auto``: ``reference`` when a subclass overrides a stage; otherwise ``cudnn`` on an NVIDIA
  GPU and ``splash`` on a TPU where they compile for the shape, else ``flash`` from
  ``FLASH_MIN_SEQ_LEN`` tokens on and ``reference`` below (where its scores are small and it
  is as fast or faster), with the reason logged.

Both kernels run per shard (``layers/kernel_sharding.py``): the batch over the mesh's batch
axes and the heads over ``tensor``, so under tensor parallelism ``head_shards`` (the tensor
axis size) must divide the query and the key/value heads, or a kernel would compute every
head on every shard; ``auto`` then takes ``flash``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from theseus.core.execution import AttentionKernel
from theseus.models.errors import ModelError

IMPLEMENTATIONS = ("auto", "reference", "flash", "cudnn", "splash")
STAGES = ("scores", "mask", "weights", "combine")  # what the kernels compute in one piece
HALF_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128
GPU_PLATFORMS = ("gpu", "cuda")

log = logging.getLogger(__name__)

# Measured on the 2-core CPU (one attention layer, d_model 128, 4 heads of 32, batch 4,
# forward + backward jitted; reference in blocks of 64 queries, flash in blocks of 128),
# reference vs flash: T=128 3.6 vs 4.3 ms, 256 10-19 vs 12-25 ms, 512 39 vs 34-37 ms,
# 768 192 vs 68 ms, 1024 319 vs 112 ms, 2048 944 vs 408 ms; temps 31 vs 12 MiB at 512,
# 112 vs 18 MiB at 1024, 416 vs 36 MiB at 2048. From 512 on flash is as fast or faster.
FLASH_MIN_SEQ_LEN = 512


def resolve_attention(
    config_attention: str,
    platform: str,
    seq_len: int,
    overridden_stages: Sequence[str] = (),
    *,
    dtype: str = "float32",
    head_dim: int = 64,
    n_heads: int = 0,
    n_kv_heads: int = 0,
    head_shards: int = 1,
    device_kind: str = "",
    interpret: bool = False,
    layer: str = "the layer",
) -> str:
    """The implementation that runs: one of ``reference``, ``flash``, ``cudnn``, ``splash``.

    ``platform`` is the devices' platform (``cpu``, ``gpu``/``cuda``/``rocm``, ``tpu``) and
    ``device_kind`` their chip (``TPU v5``, ``NVIDIA H100 80GB HBM3``; named in the log);
    ``head_shards`` the ways the heads are split (the ``tensor`` mesh axis);
    ``overridden_stages`` the stages (of ``STAGES``) a subclass of ``Attention`` overrides,
    named in errors as ``layer``; ``interpret`` lets ``splash`` run in the Pallas
    interpreter off TPU. Raises a one-line ModelError for a choice that cannot run there.
    """
    check_attention(config_attention, overridden_stages, layer=layer)
    heads = (n_heads, n_kv_heads)
    if config_attention == "auto":
        return _auto(
            platform, seq_len, overridden_stages, dtype, head_dim, heads, head_shards, device_kind
        )
    if config_attention == "cudnn":
        _check_cudnn(platform, dtype, head_dim)
    if config_attention == "splash" and platform != "tpu" and not interpret:
        raise ModelError(
            f"model.attention=splash needs a TPU (backend is {platform}); use flash or auto"
        )
    return config_attention


def check_attention(
    config_attention: str, overridden_stages: Sequence[str] = (), *, layer: str = "the layer"
) -> None:
    """What can be refused before knowing the backend: an unknown name, or a kernel that
    would skip a stage the layer's class overrides."""
    if config_attention not in IMPLEMENTATIONS:
        raise ModelError(
            f"model.attention={config_attention!r}: use one of {', '.join(IMPLEMENTATIONS)}"
        )
    if config_attention not in ("auto", "reference") and overridden_stages:
        raise ModelError(
            f"model.attention={config_attention}: {layer} overrides Attention."
            f"{overridden_stages[0]}; use model.attention=reference (or auto)"
        )


def _auto(
    platform: str,
    seq_len: int,
    overridden: Sequence[str],
    dtype: str,
    head_dim: int,
    heads: tuple[int, int],
    head_shards: int,
    device_kind: str,
) -> str:
    if overridden:
        return "reference"
    fallback = "flash" if seq_len >= FLASH_MIN_SEQ_LEN else "reference"
    if platform in GPU_PLATFORMS:
        kernel, problem = "cudnn", _cudnn_problem(dtype, head_dim)
    elif platform == "tpu":
        kernel, problem = "splash", None
    else:
        return fallback
    problem = problem or _heads_problem(heads, head_shards)
    if problem is None:
        return kernel
    chip = f" on {device_kind}" if device_kind else ""
    log.info("model.attention=auto: %s, not %s%s: it needs %s", fallback, kernel, chip, problem)
    return fallback


def _heads_problem(heads: tuple[int, int], head_shards: int) -> str | None:
    """Why the heads cannot be split ``head_shards`` ways, or None."""
    if head_shards <= 1:
        return None
    for count, what in zip(heads, ("query", "key/value"), strict=True):
        if count and count % head_shards:
            return f"{what} heads ({count}) that divide the tensor axis ({head_shards})"
    return None


def _cudnn_problem(dtype: str, head_dim: int) -> str | None:
    if dtype not in HALF_DTYPES:
        return f"model.dtype=bfloat16 or float16 (not {dtype})"
    if head_dim % 8 or head_dim > CUDNN_MAX_HEAD_DIM:
        return f"a head_dim that is a multiple of 8 up to {CUDNN_MAX_HEAD_DIM} (not {head_dim})"
    return None


def _check_cudnn(platform: str, dtype: str, head_dim: int) -> None:
    if platform not in GPU_PLATFORMS:
        raise ModelError(
            f"model.attention=cudnn needs an NVIDIA GPU (backend is {platform}); use flash or auto"
        )
    problem = _cudnn_problem(dtype, head_dim)
    if problem is not None:
        raise ModelError(f"model.attention=cudnn needs {problem}; use flash or auto")


def unplanned_kernel(implementation: str) -> AttentionKernel:
    """What a layer built without an execution plan runs: ``model.attention`` as named, the
    reference stages for ``auto`` (choosing a kernel takes a platform and a length: a plan)."""
    if implementation == "auto":
        return AttentionKernel("reference", why="no execution plan: the reference stages")
    return AttentionKernel(implementation, why="model.attention, no plan", planned=False)
