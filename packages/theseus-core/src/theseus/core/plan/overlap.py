"""How much of a step's collective time the compiled schedule hides behind compute.

XLA's latency-hiding scheduler splits a collective into a start and a done
(``all-gather-start``/``-done``, ``collective-permute-start``/``-done``, ``async-start``/
``async-done`` around a reduce-scatter or all-to-all, ...) and places compute between them;
the optimized module (``is_scheduled=true``) prints each computation's instructions in the
order they run. This replays that order on two resources, one computation at a time:

* the **cores** run the instructions one after the other, each for its roofline time
  (``hlo_stats``: ``max(FLOPs / peak, bytes / HBM bandwidth)``); a ``while`` runs its body
  and condition ``trip count`` times, a ``conditional`` its longest branch;
* the **links** move each collective's bytes (twice for an all-reduce, once for one fused
  with the slice that keeps this chip's piece: a reduce-scatter) at the chip's interconnect
  bandwidth, one transfer after the other from when it is started: two
  in flight share the links, so one piece of compute cannot hide both in full.

A done waits for its transfer; a synchronous collective waits for the links and then for
its own transfer. A transfer wholly between its start and its done, on links free
otherwise, is thus exposed by ``max(0, transfer - compute between them)``. The step's time
is the entry computation's replay: compute plus the waits (the exposed collective time);
the rest of the collective time was hidden.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from theseus.core.plan.hlo_stats import (
    HloStats,
    collective_kind,
    collective_payload,
    transfers,
)
from theseus.core.plan.hlo_text import Computation, Instruction, called, parse_module

LINK_PASSES = {"all-reduce": 2.0}  # reduce-scatter then all-gather; the others move once
DONES = ("-done", "async-update")


@dataclass
class Overlap:
    """One step (the entry computation), in seconds."""

    seconds: float  # compute + exposed
    compute_seconds: float  # the roofline of every instruction the cores run
    collective_seconds: float  # every collective's bytes over the links
    exposed_seconds: float  # the cores waiting for the links

    @property
    def hidden_seconds(self) -> float:
        return hidden(self.collective_seconds, self.exposed_seconds)


def hidden(collective_seconds: float, exposed_seconds: float) -> float:
    """The collective time not waited for; a difference within rounding of the sums (one part
    in 1e9) is none, not a residue such as 4e-16 s."""
    difference = collective_seconds - exposed_seconds
    return difference if difference > 1e-9 * collective_seconds else 0.0


def overlap(text: str, stats: HloStats, interconnect: float) -> Overlap:
    """Replay the schedule of the module ``text`` (``stats``: its ``analyze``, which priced
    its instructions) with collectives at ``interconnect`` bytes/s."""
    computations = parse_module(text)
    by_name = {c.name: c for c in computations}
    shapes = {i.name: i.result for c in computations for i in c.instructions}
    replays: dict[str, Overlap] = {}

    def link_seconds(instruction: Instruction) -> float:
        scatter = _scattered(instruction, by_name)
        passes = [
            (1.0 if c.name == scatter else LINK_PASSES.get(collective_kind(c.opcode) or "", 1.0))
            * collective_payload(c, shapes)
            for c in transfers(instruction, by_name)
        ]
        return sum(passes) / interconnect

    def replay(name: str) -> Overlap:
        if name not in replays:
            replays[name] = _replay(by_name[name], stats, link_seconds, replay)
        return replays[name]

    entry = next(c for c in computations if c.entry)
    return replay(entry.name)


@dataclass
class _Timeline:
    """The cores' clock and the links' queue through one run of a computation."""

    clock: float = 0.0  # the cores
    links_free: float = 0.0  # when the links finish the transfers given them so far
    compute: float = 0.0
    link: float = 0.0
    waited: float = 0.0  # the cores idle, waiting for the links

    def wait(self, until: float) -> None:
        if until > self.clock:
            self.waited += until - self.clock
            self.clock = until

    def send(self, seconds: float) -> float:
        """A transfer queued on the links now: when it ends."""
        self.links_free = max(self.clock, self.links_free) + seconds
        self.link += seconds
        return self.links_free

    def run(self, block: Overlap) -> None:
        """A loop or branch: its own schedule, its transfers queued after the others."""
        self.links_free = max(self.links_free, self.clock) + block.collective_seconds
        self.clock += block.seconds
        self.compute += block.compute_seconds
        self.link += block.collective_seconds
        self.waited += block.exposed_seconds


def _replay(
    computation: Computation,
    stats: HloStats,
    link_seconds: Callable[[Instruction], float],
    replay: Callable[[str], Overlap],
) -> Overlap:
    """One run of ``computation`` (module docstring)."""
    line = _Timeline()
    ends: dict[str, float] = {}  # a started transfer's end, by its start's name
    origin: dict[str, str] = {}  # an async-update's start
    for instruction in computation.instructions:
        opcode, name = instruction.opcode, instruction.name
        if opcode.endswith(DONES):
            starts = [origin.get(operand, operand) for operand in instruction.operands]
            start = next((s for s in starts if s in ends), "")
            if opcode == "async-update":
                origin[name] = start
            elif start:
                line.wait(ends.pop(start))
            continue
        moved = link_seconds(instruction)
        block = _nested(instruction, stats, replay) if not moved else None
        if moved and opcode.endswith("-start"):
            ends[name] = line.send(moved)
        elif moved:  # synchronous: the cores wait for it
            line.wait(line.send(moved))
        elif block is not None:
            line.run(block)
        else:
            seconds = stats.instruction_seconds.get(name, 0.0)
            line.clock += seconds
            line.compute += seconds
    for end in ends.values():  # a transfer not waited for inside: waited for at the end
        line.wait(end)
    return Overlap(line.clock, line.compute, line.link, line.waited)


def _scattered(instruction: Instruction, by_name: dict[str, Computation]) -> str:
    """The all-reduce of which a fusion keeps only its own slice (XLA:TPU's reduce-scatter:
    one pass over the links, not two), or ""."""
    if instruction.opcode != "fusion":
        return ""
    fused = by_name.get((called(instruction).get("calls") or [""])[0])
    root = next((i for i in fused.instructions if i.root), None) if fused else None
    if root is None or root.opcode != "dynamic-slice" or not root.operands:
        return ""
    return root.operands[0]


def _nested(
    instruction: Instruction, stats: HloStats, replay: Callable[[str], Overlap]
) -> Overlap | None:
    """A loop (its trips of body and condition) or a conditional (its longest branch) as one
    block of the caller's schedule; None for any other instruction."""
    roles = called(instruction)
    if instruction.opcode == "while":
        trips = stats.trip_counts.get(instruction.name, 1)
        parts = [replay(name) for role in ("body", "condition") for name in roles.get(role, [])]
        return Overlap(*(trips * sum(getattr(p, field) for p in parts) for field in _FIELDS))
    if instruction.opcode == "conditional":
        branches = [
            replay(name)
            for role in ("true_computation", "false_computation", "branch_computations")
            for name in roles.get(role, [])
        ]
        return max(branches, key=lambda b: b.seconds) if branches else None
    return None


_FIELDS = ("seconds", "compute_seconds", "collective_seconds", "exposed_seconds")
