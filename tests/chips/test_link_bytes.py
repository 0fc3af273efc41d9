"""``link_bytes``: collectives priced as what they send over the links, on a hand-written
module of 8 partitions whose every kind of collective is known."""

from __future__ import annotations

import pytest
from theseus.core.plan.hlo_stats import analyze
from theseus.core.plan.link_bytes import link_bytes, link_share

S = 1024 * 4  # bytes of f32[1024]
TRIPS = 3

MODULE = f"""HloModule m, is_scheduled=true, num_partitions=8

%sum (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%body (p: (s32[], f32[1024])) -> (s32[], f32[1024]) {{
  %p = (s32[], f32[1024]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[1024]{{0}} get-tuple-element(%p), index=1
  %ar = f32[1024]{{0}} all-reduce(%x), channel_id=1, replica_groups={{{{0,1,2,3}},{{4,5,6,7}}}}, to_apply=%sum
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[1024]) tuple(%next, %ar)
}}

%cond (c: (s32[], f32[1024])) -> pred[] {{
  %c = (s32[], f32[1024]) parameter(0)
  %j = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant({TRIPS})
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}}

ENTRY %main (x: f32[1024], y: f32[128]) -> (s32[], f32[1024]) {{
  %x = f32[1024]{{0}} parameter(0)
  %y = f32[128]{{0}} parameter(1)
  %ag = f32[1024]{{0}} all-gather(%y), channel_id=2, replica_groups=[1,8]<=[8], dimensions={{0}}
  %rs = f32[128]{{0}} reduce-scatter(%x), channel_id=3, replica_groups={{}}, dimensions={{0}}, to_apply=%sum
  %a2a = f32[1024]{{0}} all-to-all(%x), channel_id=4, replica_groups={{{{0,1}},{{2,3}},{{4,5}},{{6,7}}}}, dimensions={{0}}
  %cp = f32[1024]{{0}} collective-permute(%x), channel_id=5, source_target_pairs={{{{0,1}},{{1,0}}}}
  %zero = s32[] constant(0)
  %init = (s32[], f32[1024]) tuple(%zero, %x)
  ROOT %loop = (s32[], f32[1024]) while(%init), condition=%cond, body=%body
}}
"""


def test_each_kind_is_priced_as_what_its_ring_sends():
    sent = link_bytes(MODULE)
    assert sent["all-reduce"] == pytest.approx(TRIPS * 2 * 3 / 4 * S)  # groups of 4, per trip
    assert sent["all-gather"] == pytest.approx(7 / 8 * S)  # iota groups of 8
    assert sent["reduce-scatter"] == pytest.approx(7 / 8 * S)  # no groups: all 8 partitions
    assert sent["all-to-all"] == pytest.approx(1 / 2 * S)  # pairs: half the rows leave
    assert sent["collective-permute"] == pytest.approx(S)  # as sent
    # beside the result-size count the same instructions give
    counted = analyze(MODULE).collective_bytes
    assert set(counted) == set(sent)
    assert counted["all-reduce"] == TRIPS * S and counted["collective-permute"] == S


def test_a_collective_over_one_device_sends_nothing():
    assert link_share("all-reduce", 1) == 0.0 and link_share("all-gather", 1) == 0.0
    assert link_share("collective-permute", 1) == 1.0
    assert link_share("all-reduce", 32) == pytest.approx(2 * 31 / 32)
