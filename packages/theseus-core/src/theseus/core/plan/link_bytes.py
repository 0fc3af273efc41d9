"""What one device's collectives put on its links per step, read from its optimized HLO text.

``hlo_stats`` counts a collective by its size (the larger of what it takes and gives), which
hides what the links carry: a ring all-reduce of S bytes over n devices sends ``2 (n - 1) / n
S`` from each (a reduce-scatter, then an all-gather), an all-gather or a reduce-scatter ``(n
- 1) / n`` of its whole size, an all-to-all (ragged too) the ``(n - 1) / n`` of its rows that
go to the others, and a collective-permute what it sends. ``n`` is the size of the
collective's replica group, read from the instruction (``replica_groups={{0,1},{2,3}}``, the
iota form ``[groups,size]<=[...]``, or none: every device of the module, its header's
``num_partitions`` or ``replica_count``). Loops count
their trips, as ``hlo_stats.step_instructions`` runs them.
"""

from __future__ import annotations

import re
from collections import defaultdict

from theseus.core.plan.hlo_stats import collective_kind, collective_payload, step_instructions
from theseus.core.plan.hlo_text import Instruction

_GROUPS = re.compile(r"replica_groups=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)?\}")
_IOTA = re.compile(r"replica_groups=\[(\d+),(\d+)\]<=")
_DEVICES = re.compile(r"\b(?:num_partitions|replica_count)=(\d+)")


def group_size(instruction: Instruction, partitions: int) -> int:
    """Devices in the instruction's replica group (``partitions`` when it names none)."""
    iota = _IOTA.search(instruction.attributes)
    if iota:
        return int(iota.group(2))
    listed = _GROUPS.search(instruction.attributes)
    if listed and listed.group(1):
        first = listed.group(1)[1:].split("}", 1)[0]
        return len([d for d in first.split(",") if d])
    return partitions


def link_share(kind: str, n: int) -> float:
    """The part of a collective's counted size one device sends over its links."""
    if kind == "collective-permute":
        return 1.0
    if n <= 1:
        return 0.0
    ring = (n - 1) / n
    return 2 * ring if kind == "all-reduce" else ring


def link_bytes(text: str) -> dict[str, float]:
    """Bytes per device per step that each kind of collective sends over the links."""
    header = text.split("\n", 1)[0]
    partitions = max((int(n) for n in _DEVICES.findall(header)), default=1)
    ran, shapes = step_instructions(text)
    sent: dict[str, float] = defaultdict(float)
    for instruction, runs in ran:
        kind = collective_kind(instruction.opcode)
        if kind is None:
            continue
        share = link_share(kind, group_size(instruction, partitions))
        sent[kind] += runs * share * collective_payload(instruction, shapes)
    return dict(sorted(sent.items()))
