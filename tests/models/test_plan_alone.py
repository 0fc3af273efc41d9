"""Layers are built with the execution plan and run on it alone: every family traces with no
mesh in context from its plan; no setter hands a layer the plan after it is built; and the
layers that split their work over a mesh read nothing of the mesh in context or the backend
while they are traced (the plan's mesh axes and chips say what they need)."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from theseus.core.execution import AttentionKernel, ContextSplit, ExecutionPlan
from theseus.models.families import FAMILIES
from theseus.models.layers import attention, decoder, moe
from theseus.models.layers.attention import Attention
from theseus.models.layers.moe import MoE

from tests.models.conftest import VOCAB, tiny

# a step's plan on a mesh of 8 (experts and sequences split), as a setup decides it
SPLIT = ExecutionPlan(
    attention=AttentionKernel("flash", context="ring"),
    context=ContextSplit("ring", "zigzag", 2),
    experts="all_to_all",
    expert_ways=2,
    expert_capacity=1.25,
    compute_dtype="bfloat16",
    mesh_axes=(("data", 1), ("fsdp", 2), ("expert", 2), ("tensor", 1), ("context", 2)),
    platform="tpu",
    device_kind="TPU v5 lite",
)


@pytest.mark.parametrize("family", [f.name for f in FAMILIES])
def test_every_family_traces_on_its_plan_alone_with_no_mesh_in_context(family):
    """The model of a split step's plan, unsplit (what evaluations and generation run):
    its layers run the plan's kernel and routing, in its dtype, traced with no mesh."""
    plan = SPLIT.unsplit()
    assert jax.sharding.get_abstract_mesh().empty
    model = tiny(family, execution=plan)
    tokens = jax.random.randint(jax.random.key(0), (2, 16), 1, VOCAB)
    graphdef, state = nnx.split(model)
    logits = jax.eval_shape(lambda s: nnx.merge(graphdef, s).forward_with_aux(tokens)[0], state)
    assert logits.shape == (2, 16, VOCAB)
    layers = model.attention_layers()
    assert layers and all(layer.context == ContextSplit() for layer in layers)
    kernels = {layer.kernel.label() for layer in layers if not layer.overridden_stages()}
    assert kernels <= {"flash"}
    assert all(jnp.dtype(layer.dtype) == jnp.bfloat16 for layer in layers)
    experts = [m for _, m in nnx.iter_graph(model) if isinstance(m, MoE)]
    assert all(m.routing == "global" and not m.routes_per_device() for m in experts)


def test_a_split_plan_reaches_the_layers_in_their_constructors():
    model = nnx.eval_shape(lambda: tiny("qwen3_moe", execution=SPLIT))
    (layer,) = {id(m): m for m in model.attention_layers()}.values()  # one stacked layer
    assert (layer.kernel, layer.context) == (SPLIT.attention, SPLIT.context)
    assert dict(layer.mesh_sizes)["context"] == 2 and layer.platform == "tpu"
    (experts,) = {id(m): m for _, m in nnx.iter_graph(model) if isinstance(m, MoE)}.values()
    assert experts.routing == "all_to_all" and experts.routes_per_device()
    assert experts.dispatch_capacity == 1.25


def test_no_setter_hands_a_layer_the_plan_after_it_is_built():
    setters = [(decoder.DecoderLM, "follow"), (Attention, "use"), (MoE, "route_by")]
    assert not [f"{cls.__name__}.{name}" for cls, name in setters if hasattr(cls, name)]


# what reads the mesh in context or the backend; ``default_backend`` is allowed where a layer
# is built without a plan (its constructor's default: this process's backend)
READERS = {"get_abstract_mesh", "current_mesh", "axis_size", "context_mesh", "context_platform"}
BUILT_AT = {"_run_as_planned", "__init__", "unplanned_execution"}


def reads_in(module: ModuleType) -> list[str]:
    """``function: reader`` for each call of a reader in the functions of ``module``."""
    tree = ast.parse(inspect.getsource(module))
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        for call in ast.walk(function):
            if not isinstance(call, ast.Call):
                continue
            name = getattr(call.func, "attr", getattr(call.func, "id", ""))
            backend = name == "default_backend" and function.name not in BUILT_AT
            if name in READERS or backend:
                found.append(f"{function.name}: {name}")
    return found


def test_the_layers_that_split_work_read_no_mesh_or_backend_while_traced():
    from theseus.models.layers import (
        context_attention,
        expert_parallel,
        kernel_sharding,
        mla,
        moe_decoder,
    )

    planned = [attention, mla, decoder, moe, moe_decoder, expert_parallel]
    planned += [kernel_sharding, context_attention]
    found = {m.__name__: reads_in(m) for m in planned}
    assert not {name: reads for name, reads in found.items() if reads}
    # the walk sees a reader where one is called (a broken walk would pass vacuously)
    from theseus.models.layers import embedding

    assert reads_in(embedding)


def test_a_family_that_builds_a_layer_without_the_plan_is_refused():
    """A layer built without the model's plan would attend over its own share of a split
    sequence only: the model refuses it, naming the layer."""
    from theseus.models.errors import ModelError
    from theseus.models.llama.model import Llama

    class Unplanned(Llama):
        def make_attention(self, index, rngs):
            c = self.config
            return Attention(c.d_model, c.n_heads, c.n_kv_heads, self.head_dim, rngs=rngs)

    config = tiny("llama").config
    with pytest.raises(ModelError, match="Attention layer was built without the model's"):
        Unplanned(config, rngs=nnx.Rngs(0), execution=SPLIT)
    assert Unplanned(config, rngs=nnx.Rngs(0)).attention_layers()  # no plan: nothing to split
