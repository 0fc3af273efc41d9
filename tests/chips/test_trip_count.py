"""``trip_count`` on hand-written loops whose counter is copied or converted on its way to the
add that steps it or the compare that bounds it (as XLA:TPU writes some windowed matmuls)."""

from __future__ import annotations

import pytest
from theseus.core.plan.hlo_stats import analyze

M, K = 8, 16
DOT_FLOPS = 2 * M * K * K  # one f32[M, K] @ f32[K, K] per trip


def loop(
    start: int, step: int, bound: int, add_through: str, compare_through: str, copy_sum: bool
) -> str:
    """A while loop whose counter (tuple element 0) starts at ``start`` and steps by ``step``
    while below ``bound``; the body adds to ``add_through(counter)`` (and returns a copy of
    the sum if ``copy_sum``) and the condition compares ``compare_through(counter)`` (``""``:
    the counter itself). Each trip runs one matmul."""
    state = f"(s32[], f32[{M},{K}], f32[{K},{K}])"

    def through(op: str, name: str, into: str) -> tuple[str, str]:
        if not op:
            return "", name
        kind = "s64" if op == "convert" else "s32"
        return f"  %{into} = {kind}[] {op}(%{name})\n", into

    add_line, counter = through(add_through, "i", "i.moved")
    compare_line, compared = through(compare_through, "j", "j.moved")
    add_type = "s64" if add_through == "convert" else "s32"
    compare_type = "s64" if compare_through == "convert" else "s32"
    back = "convert" if add_type == "s64" else "copy" if copy_sum else ""
    back_line = f"  %next = s32[] {back}(%sum)\n" if back else ""
    result = "next" if back else "sum"
    return f"""HloModule m, is_scheduled=true

%body (s: {state}) -> {state} {{
  %s = {state} parameter(0)
  %step = {add_type}[] constant({step})
  %i = s32[] get-tuple-element(%s), index=0
  %h = f32[{M},{K}]{{1,0}} get-tuple-element(%s), index=1
  %w = f32[{K},{K}]{{1,0}} get-tuple-element(%s), index=2
  %d = f32[{M},{K}]{{1,0}} dot(%h, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
{add_line}  %sum = {add_type}[] add(%{counter}, %step)
{back_line}  ROOT %t = {state} tuple(%{result}, %d, %w)
}}

%cond (c: {state}) -> pred[] {{
  %c = {state} parameter(0)
  %bound = {compare_type}[] constant({bound})
  %j = s32[] get-tuple-element(%c), index=0
{compare_line}  ROOT %lt = pred[] compare(%{compared}, %bound), direction=LT
}}

ENTRY %main (h: f32[{M},{K}], w: f32[{K},{K}]) -> {state} {{
  %h = f32[{M},{K}]{{1,0}} parameter(0)
  %w = f32[{K},{K}]{{1,0}} parameter(1)
  %zero = s32[] constant({start})
  %start = s32[] copy(%zero)
  %init = {state} tuple(%start, %h, %w)
  ROOT %loop = {state} while(%init), condition=%cond, body=%body
}}
"""


@pytest.mark.parametrize(
    "add_through, compare_through",
    [("copy", ""), ("convert", ""), ("", "copy"), ("", "convert"), ("copy", "convert")],
)
def test_a_counter_copied_or_converted_still_gives_its_step_and_start(add_through, compare_through):
    """From 0 by 2 below 16: 8 trips (16 were the step not found); from 4 by 3 below 16: 4
    trips (16 were neither the start nor the step found)."""
    for start, step, trips in ((0, 2, 8), (4, 3, 4)):
        text = loop(start, step, 16, add_through, compare_through, copy_sum=True)
        stats = analyze(text)
        assert stats.trip_counts == {"loop": trips}
        assert stats.dynamic_loops == 0
        assert stats.flops == trips * DOT_FLOPS


def test_a_counter_used_as_is_counts_as_before():
    stats = analyze(loop(0, 2, 16, "", "", copy_sum=False))
    assert stats.trip_counts == {"loop": 8} and stats.flops == 8 * DOT_FLOPS
