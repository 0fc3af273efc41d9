"""Which positions of a sequence each device of the ``context`` mesh axis holds (no JAX).

With ``sharding.context=N`` every row of the batch is split into N equal parts along the
sequence, one per device. Under a causal mask the parts do not cost the same: the device
holding the end of the sequence attends to every earlier token, the first device to almost
none. The order fixes that:

* ``contiguous``: device d holds positions ``[d T/N, (d + 1) T/N)``;
* ``zigzag``: the sequence is cut into 2N chunks of ``c = T / 2N`` and device d holds chunks
  d and 2N - 1 - d (an early and a late one), so every device attends over the same number of
  (query, key) pairs, and, in a ring, every step of every device is half of a full block.

The loader writes each row in *layout order*, the positions of device 0 first, then device
1's, ... (:func:`layout_order`), so that the ordinary split of the sequence dimension gives
every device its chunks; positions, segment ids, targets and loss masks travel with their
tokens, so the summed loss is the same sum in another order. Attention is the one stage that
needs the original positions back: :func:`chunk_starts` gives them from the device index.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from theseus.core.sharding.config import CONTEXT_ORDERS, ShardingError

ORDERS = CONTEXT_ORDERS


def chunks_per_device(order: str) -> int:
    """How many contiguous runs of positions one device holds."""
    return 2 if order == "zigzag" else 1


def chunk_starts(device: Any, devices: int, chunk: int, order: str) -> list[Any]:
    """The first sequence position of each chunk ``device`` holds (``chunk`` positions each).

    ``device`` may be a Python int or a traced index (``jax.lax.axis_index``): the arithmetic
    is the same.
    """
    if order == "zigzag":
        return [device * chunk, (2 * devices - 1 - device) * chunk]
    return [device * chunk]


def check_sequence(seq_len: int, devices: int, order: str, key: str = "training.seq_len") -> int:
    """The chunk length, or a one-line error when ``seq_len`` does not split evenly."""
    parts = devices * chunks_per_device(order)
    if devices < 1 or seq_len % parts:
        into = f" into the {parts} chunks of {order}" if parts != devices else ""
        raise ShardingError(
            f"sharding.context={devices} does not divide {key}={seq_len}{into}: use a "
            f"multiple of {parts} (sharding.context_order={order})"
        )
    return seq_len // parts


def layout_order(seq_len: int, devices: int, order: str) -> np.ndarray:
    """``perm`` with ``row[perm]`` in layout order: entry i is the sequence position stored at
    column i (device d's columns are ``[d T/N, (d + 1) T/N)``)."""
    chunk = check_sequence(seq_len, devices, order)
    starts = [s for d in range(devices) for s in chunk_starts(d, devices, chunk, order)]
    return np.concatenate([np.arange(s, s + chunk) for s in starts]).astype(np.int64)
