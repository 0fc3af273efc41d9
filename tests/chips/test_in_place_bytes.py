"""``hlo_stats`` bytes of a fusion that reads a slice of a buffer, changes it and writes it
back in place (how XLA:TPU runs a scatter-add: one expert's weight gradient per trip of a
loop over the tiles): the slice moves, not the buffer."""

from __future__ import annotations

from theseus.core.plan.hlo_stats import analyze

ROWS, WIDTH = 64, 128
ROW = WIDTH * 2  # bytes of one bf16 row

MODULE = f"""HloModule m, is_scheduled=true

%add_row (buffer: bf16[{ROWS},{WIDTH}], row: bf16[1,{WIDTH}], at: s32[]) -> bf16[{ROWS},{WIDTH}] {{
  %buffer = bf16[{ROWS},{WIDTH}]{{1,0}} parameter(0)
  %row = bf16[1,{WIDTH}]{{1,0}} parameter(1)
  %at = s32[] parameter(2)
  %zero = s32[] constant(0)
  %old = bf16[1,{WIDTH}]{{1,0}} dynamic-slice(%buffer, %at, %zero), dynamic_slice_sizes={{1,{WIDTH}}}
  %sum = bf16[1,{WIDTH}]{{1,0}} add(%old, %row)
  ROOT %new = bf16[{ROWS},{WIDTH}]{{1,0}} dynamic-update-slice(%buffer, %sum, %at, %zero)
}}

ENTRY %main (buffer: bf16[{ROWS},{WIDTH}], row: bf16[1,{WIDTH}], at: s32[]) -> bf16[{ROWS},{WIDTH}] {{
  %buffer = bf16[{ROWS},{WIDTH}]{{1,0}} parameter(0)
  %row = bf16[1,{WIDTH}]{{1,0}} parameter(1)
  %at = s32[] parameter(2)
  ROOT %fusion = bf16[{ROWS},{WIDTH}]{{1,0}} fusion(%buffer, %row, %at), kind=kLoop, calls=%add_row
}}
"""


def test_a_slice_read_changed_and_written_back_moves_the_slice():
    """The row read from the buffer, the row added, the index, and the row written back:
    3 rows and 4 bytes (the whole buffer read would be 63 rows more)."""
    assert analyze(MODULE).bytes == 3 * ROW + 4


def test_a_buffer_also_read_whole_counts_whole():
    whole = MODULE.replace(
        f"%sum = bf16[1,{WIDTH}]{{1,0}} add(%old, %row)",
        f"%sum = bf16[1,{WIDTH}]{{1,0}} add(%old, %row)\n"
        f"  %all = bf16[{ROWS},{WIDTH}]{{1,0}} negate(%buffer)",
    )
    assert "%all" in whole
    assert analyze(whole).bytes == ROWS * ROW + 2 * ROW + 4
