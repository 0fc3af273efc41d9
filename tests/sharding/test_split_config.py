"""The context and expert axes without devices: config checks, mesh sizes, the sequence
layout, and the one-line refusals of what a model or a sequence cannot split."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from flax import nnx
from theseus.core.errors import TheseusError
from theseus.core.sharding.config import ShardingConfig, ShardingError, mesh_shape
from theseus.core.sharding.sequence import check_sequence, chunk_starts, layout_order
from theseus.core.train.execution_choice import MeshFacts, plan_execution
from theseus.models.errors import ModelError
from theseus.models.gpt.config import GPTConfig
from theseus.models.gpt.model import GPT
from theseus.models.layers.attention import Attention
from theseus.models.qwen3_moe.config import PRESETS, Qwen3MoeConfig
from theseus.models.qwen3_moe.model import Qwen3Moe

from tests.conftest import host_devices
from tests.train.conftest import TINY, theseus_cmd


def abstract(model_class=GPT, config=None):
    config = config or GPTConfig(vocab_size=64, n_layers=2, d_model=32, n_heads=2)
    return nnx.eval_shape(lambda: model_class(config, rngs=nnx.Rngs(0)))


def plan(model, sharding: ShardingConfig, sizes: dict[str, int], name: str = "gpt"):
    """The execution plan for ``model`` on a CPU mesh of ``sizes``, 32-token sequences."""
    return plan_execution(model, sharding, MeshFacts(sizes), 32, name)


def moe(n_experts: int = 4):
    tiny = {**PRESETS["tiny"], "n_experts": n_experts}
    return abstract(Qwen3Moe, Qwen3MoeConfig(vocab_size=64, **tiny))


@pytest.mark.parametrize(
    "field, value", [("context_attention", "ulysses"), ("context_order", "striped")]
)
def test_unknown_method_or_order_is_refused_naming_the_key(field, value):
    with pytest.raises(ShardingError, match=rf"^sharding\.{field}='{value}': expected one of"):
        ShardingConfig(**{field: value})


def test_the_new_axes_take_their_share_of_the_devices():
    sizes = mesh_shape(ShardingConfig(context=4), 8)
    assert sizes == {"data": 2, "fsdp": 1, "expert": 1, "context": 4, "tensor": 1}
    sizes = mesh_shape(ShardingConfig(strategy="fsdp", expert=2, context=2), 8)
    assert sizes == {"data": 1, "fsdp": 2, "expert": 2, "context": 2, "tensor": 1}
    with pytest.raises(ShardingError, match=r"\(data=1, fsdp=1, context=3, tensor=1\) has 3"):
        mesh_shape(ShardingConfig(data=1, context=3), 8)


def test_zigzag_layout_is_a_permutation_that_balances_causal_work():
    T, N = 64, 4
    for order in ("zigzag", "contiguous"):
        perm = layout_order(T, N, order)
        assert sorted(perm) == list(range(T))
    # (query, key) pairs a causal mask keeps, per device: position p sees p + 1 keys
    zigzag = layout_order(T, N, "zigzag").reshape(N, -1) + 1
    contiguous = layout_order(T, N, "contiguous").reshape(N, -1) + 1
    assert len(set(zigzag.sum(axis=1))) == 1  # every device the same work
    assert contiguous.sum(axis=1).tolist() == sorted(contiguous.sum(axis=1).tolist())
    assert contiguous.sum(axis=1)[-1] > 3 * contiguous.sum(axis=1)[0]
    # the chunk starts attention restores from a device index are the layout's
    chunk = T // (2 * N)
    for device in range(N):
        starts = chunk_starts(device, N, chunk, "zigzag")
        held = layout_order(T, N, "zigzag").reshape(N, -1)[device]
        assert [held[0], held[chunk]] == starts


@pytest.mark.parametrize(
    "seq_len, devices, order, message",
    [
        (30, 4, "zigzag", "does not divide training.seq_len=30 into the 8 chunks of zigzag"),
        (30, 4, "contiguous", "sharding.context=4 does not divide training.seq_len=30: use a"),
    ],
)
def test_a_sequence_the_context_axis_does_not_divide_is_refused(seq_len, devices, order, message):
    with pytest.raises(ShardingError, match=message):
        check_sequence(seq_len, devices, order)
    assert check_sequence(32, 4, order) == 32 // (8 if order == "zigzag" else 4)


def test_context_split_reaches_every_attention_layer_through_the_plan():
    config = GPTConfig(vocab_size=64, n_layers=2, d_model=32, n_heads=2)
    execution = plan(abstract(config=config), ShardingConfig(context=2), {"context": 2})
    assert execution.attention.label() == "ring/flash"
    assert (execution.context.method, execution.context.order) == ("ring", "zigzag")
    model = nnx.eval_shape(lambda: GPT(config, rngs=nnx.Rngs(0), execution=execution))
    layers = [m for _, m in nnx.iter_graph(model) if isinstance(m, Attention)]
    assert layers and all(m.context == execution.context for m in layers)
    assert all(m.kernel == execution.attention for m in layers)


def test_expert_routing_follows_the_mesh():
    assert plan(moe(4), ShardingConfig(expert=2), {"expert": 2}).experts == "all_to_all"
    assert plan(moe(4), ShardingConfig(), {"data": 2}).experts == "per_device"
    assert plan(moe(4), ShardingConfig(), {}).experts == "global"
    assert plan(abstract(), ShardingConfig(), {"data": 2}).experts == "none"


def test_expert_axis_on_a_dense_model_is_refused():
    with pytest.raises(ShardingError, match=r"sharding\.expert=2: model 'gpt' has no experts"):
        plan(abstract(), ShardingConfig(expert=2), {"expert": 2})


def test_expert_axis_that_does_not_divide_the_experts_is_refused():
    plan(moe(4), ShardingConfig(expert=2), {"expert": 2}, "qwen3_moe")
    with pytest.raises(ShardingError, match=r"sharding\.expert=3 does not divide the 4 experts"):
        plan(moe(4), ShardingConfig(expert=3), {"expert": 3}, "qwen3_moe")


def test_a_kernel_without_a_logsumexp_cannot_split_the_sequence():
    config = GPTConfig(vocab_size=64, n_layers=1, d_model=32, n_heads=2, attention="cudnn")
    model = abstract(config=config)
    with pytest.raises(ModelError, match="model.attention=cudnn cannot compute the blocks"):
        plan(model, ShardingConfig(context=2), {"context": 2})


class WindowedByHand(Attention):
    def mask(self, scores, info):  # a mask of its own: the flash kernel's would be wrong
        return scores


class HandGPT(GPT):
    attention_cls = WindowedByHand


def test_a_layer_with_its_own_mask_cannot_split_the_sequence():
    with pytest.raises(ModelError, match="WindowedByHand overrides Attention.mask"):
        plan(abstract(HandGPT), ShardingConfig(context=2), {"context": 2}, "hand")


class NoAttention(nnx.Module):
    def __init__(self):
        self.blocks = nnx.List([])

    def choose_attention(self, seq_len, platform, device_kind="", head_shards=1, context=None):
        return "none"


def test_a_model_without_attention_layers_cannot_split_the_sequence():
    with pytest.raises(ShardingError, match="model 'plain' has no attention layer that can"):
        plan(NoAttention(), ShardingConfig(context=2), {"context": 2}, "plain")


def test_refusals_are_one_line_errors_at_the_command_line(tmp_path):
    command = theseus_cmd(
        "run",
        "gpt/train/pretrain",
        *TINY,
        "model.vocab_size=384",
        "sharding.data=1",
        "sharding.expert=2",
        "--dry-run",
        "--root",
        str(tmp_path),
    )
    env = {**os.environ, "XLA_FLAGS": host_devices(2)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sharding.expert=2: model 'gpt' has no experts"), last
    assert issubclass(ShardingError, TheseusError)
    assert np.array_equal(layout_order(8, 1, "zigzag"), np.arange(8))  # one device: as is
