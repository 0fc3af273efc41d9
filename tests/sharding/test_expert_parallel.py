"""Expert parallelism on simulated devices: the MoE layer with its experts over ``expert``
equals the layer on one device (outputs, gradients, router statistics), including a router
that sends every token's first choice to one expert, a hidden width split over ``tensor``,
fsdp-sharded expert weights, the ragged_dot grouping, the per-device capacity rule and the
ragged dispatch (on CPU its exchange runs from an all-gather; the same routes, offsets and
gradient as on TPU); a training run follows the unsplit one (tests/sharding/split_parity.py).

Tolerances (u = 2^-24, as tests/models/test_moe_routed.py): a token's expert output is the
same arithmetic on every device (its row, its expert's weights); only a hidden width split
over ``tensor`` adds a sum over the F slices (``psum``), and the tiles' shapes may change
XLA's summation order over D and F: outputs within ``2 u (D + F + k)`` relative. Gradients
of the expert weights and of the input add the N k assignments' contributions in another
grouping: ``2 u (N k + D + F)`` relative. Assignment counts are sums of ones (exact); router
probability sums add N terms: ``2 u N``. Training: the first-order bound of
test_context_parallel.py.
"""

from __future__ import annotations

import pytest

from tests.sharding.conftest import EXPERT_TRAIN, MOE, split_parity
from tests.sharding.test_context_parallel import worst

U = 2.0**-24
N, K, D, F = 48, 2, 16, 8  # the layer of split_parity.moe_scenario: 8 x 6 tokens, top-2
OUTPUT = 2 * U * (D + F + K)
GRADIENT = 2 * U * (N * K + D + F)
PROB_SUMS = 2 * U * N
# every scenario without drops (ragged=4.0: room and capacity for all that arrive here)
EXACT = [s for s in MOE if "capacity" not in s and not s.endswith("ragged=1.0")]


@pytest.fixture(scope="module")
def split_results() -> dict[str, dict]:
    return split_parity(*MOE, *EXPERT_TRAIN)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", EXACT)
def test_experts_split_over_devices_equal_one_device(split_results, scenario):
    result = split_results[scenario]
    assert result["y"] <= OUTPUT, result
    assert result["dx"] <= GRADIENT and result["dparams"] <= GRADIENT, result
    assert result["counts_equal"], result
    assert result["router"] <= PROB_SUMS, result
    assert result["drop_fraction"] == result["drop_fraction_ref"] == 0.0  # dropless


@pytest.mark.slow
def test_an_unbalanced_router_is_still_exact(split_results):
    """Every token's first choice is expert 3: one device receives every device's first
    choices (the dropless slabs have room for all of them) and nothing is lost."""
    result = split_results["moe:1,1,4,1:unbalanced"]
    assert result["busiest_expert_share"] == 0.5  # all first choices of k = 2


@pytest.mark.slow
def test_capacity_is_applied_per_device_and_drops_are_counted_over_all_tokens(split_results):
    """With a capacity the layer equals the one-device layer run on each device's tokens
    alone (the documented rule), and the reported drop fraction is over every token."""
    result = split_results["moe:2,1,2,1:capacity=1.0"]
    assert result["y"] <= OUTPUT and result["dx"] <= GRADIENT and result["dparams"] <= GRADIENT
    assert result["drop_fraction"] > 0.05  # capacity 1.0 drops some with 8 experts
    assert abs(result["drop_fraction"] - result["drop_fraction_ref"]) <= 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("scenario", EXPERT_TRAIN)
def test_training_with_split_experts_follows_the_unsplit_run(split_results, scenario):
    result = split_results[scenario]
    assert result["losses"][-1] < 0.5 * result["losses"][0]
    assert worst(result) < 1.0, (result["losses"], result["reference"])
    # experts over ``expert``; under fsdp their embed axis over fsdp too (layers first)
    fsdp = "fsdp" if scenario.split(":")[2].split(",")[1] != "1" else None  # data,fsdp,...
    assert result["expert_specs"]["w_gate"][:3] == [None, "expert", fsdp]
    assert result["expert_specs"]["w_down"][:2] == [None, "expert"]
    assert result["collectives"]["all-to-all"] >= 1  # tokens travel to their experts


@pytest.mark.slow
def test_a_bounded_ragged_dispatch_drops_what_overflows_a_receiver(split_results):
    """A capacity factor of 1.0 while every first choice goes to one expert: its device's
    buffer overflows and that expert's capacity too, and what is dropped is what the rule
    (senders in order, each chunk's tail first; then each expert's first C arrivals)
    says, counted row by row in the scenario."""
    result = split_results["moe:1,1,4,1:unbalanced+ragged=1.0"]
    assert result["drop_fraction"] > 0.1, result
    # a ratio of two integer counts below 2^24, each exact in float32
    assert abs(result["drop_fraction"] - result["drop_fraction_rule"]) <= 1e-6, result
