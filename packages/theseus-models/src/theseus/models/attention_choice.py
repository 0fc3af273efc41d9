"""Which attention implementation runs: ``model.attention`` resolved for a backend and length.

Cheap to import (no JAX). The training setup resolves it once for every layer, on the
platform of its mesh's devices (a compile-only TPU or GPU target included)::

    model.plan_attention(seq_len, platform, device_kind)   # each layer keeps its choice

or from the config alone::

    resolve_attention(config.model.attention, platform, seq_len,
                      dtype=compute_dtype(config.model.dtype), head_dim=head_dim)

* ``reference``: the stages ``scores -> mask -> weights -> combine``: every score is
  materialised (memory quadratic in the length); any stage can be overridden.
* ``flash``: blockwise online softmax in pure JAX (``layers/flash.py``), memory linear in
  the length, every backend.
* ``cudnn``: ``jax.nn.dot_product_attention(implementation="cudnn")``, NVIDIA GPUs, bf16/fp16,
  head_dim a multiple of 8 up to 128 (256 from Hopper on).
* ``splash``: the Pallas TPU splash-attention kernel (a Pallas interpreter elsewhere, for tests).
* ``auto``: ``reference`` when a subclass overrides a stage; otherwise ``cudnn`` on a GPU and
  ``splash`` on a TPU where they apply, else ``flash`` from ``FLASH_MIN_SEQ_LEN`` tokens on
  and ``reference`` below (where its scores are small and it is as fast or faster).
"""

from __future__ import annotations

from collections.abc import Sequence

from theseus.models.errors import ModelError

IMPLEMENTATIONS = ("auto", "reference", "flash", "cudnn", "splash")
STAGES = ("scores", "mask", "weights", "combine")  # what the kernels compute in one piece
HALF_DTYPES = ("bfloat16", "float16")

# Measured on the 2-core CPU (one attention layer, d_model 128, 4 heads of 32, batch 4,
# forward + backward jitted; reference in blocks of 64 queries, flash in blocks of 128),
# reference vs flash: T=128 3.6 vs 4.3 ms, 256 10-19 vs 12-25 ms, 512 39 vs 34-37 ms,
# 768 192 vs 68 ms, 1024 319 vs 112 ms, 2048 944 vs 408 ms; temps 31 vs 12 MiB at 512,
# 112 vs 18 MiB at 1024, 416 vs 36 MiB at 2048. From 512 on flash is as fast or faster.
FLASH_MIN_SEQ_LEN = 512


def resolve_attention(
    config_attention: str,
    backend: str,
    seq_len: int,
    overridden_stages: Sequence[str] = (),
    *,
    dtype: str = "float32",
    head_dim: int = 64,
    interpret: bool = False,
    layer: str = "the layer",
    device_kind: str = "",
) -> str:
    """The implementation that runs: one of ``reference``, ``flash``, ``cudnn``, ``splash``.

    ``backend`` is the platform the step runs on (``cpu``, ``gpu``/``cuda``/``rocm``,
    ``tpu``); ``device_kind`` the chip (e.g. ``TPU v5p``; "" when unknown);
    ``overridden_stages`` the stages (of ``STAGES``) a subclass of ``Attention`` overrides,
    named in errors as ``layer``; ``interpret`` lets ``splash`` run in the Pallas
    interpreter off TPU. Raises a one-line ModelError for a choice that cannot run here.
    """
    check_attention(config_attention, overridden_stages, layer=layer)
    if config_attention == "auto":
        return _auto(backend, seq_len, overridden_stages, dtype, head_dim)
    if config_attention == "cudnn":
        _check_cudnn(backend, dtype, head_dim)
    if config_attention == "splash" and backend != "tpu" and not interpret:
        raise ModelError(
            f"model.attention=splash needs a TPU (backend is {backend}); use flash or auto"
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


def _auto(backend: str, seq_len: int, overridden: Sequence[str], dtype: str, head_dim: int) -> str:
    if overridden:
        return "reference"
    cudnn_fits = _cudnn_problem(dtype, head_dim) is None and head_dim <= 128  # 128: pre-Hopper
    if backend in ("gpu", "cuda") and cudnn_fits:
        return "cudnn"
    if backend == "tpu" and head_dim % 128 == 0:
        return "splash"
    return "flash" if seq_len >= FLASH_MIN_SEQ_LEN else "reference"


def _cudnn_problem(dtype: str, head_dim: int) -> str | None:
    if dtype not in HALF_DTYPES:
        return f"model.dtype=bfloat16 or float16 (not {dtype})"
    if head_dim % 8 or head_dim > 256:
        return f"a head_dim that is a multiple of 8 up to 256 (not {head_dim})"
    return None


def _check_cudnn(backend: str, dtype: str, head_dim: int) -> None:
    if backend not in ("gpu", "cuda"):
        raise ModelError(
            f"model.attention=cudnn needs an NVIDIA GPU (backend is {backend}); use flash or auto"
        )
    problem = _cudnn_problem(dtype, head_dim)
    if problem is not None:
        raise ModelError(f"model.attention=cudnn needs {problem}; use flash or auto")
