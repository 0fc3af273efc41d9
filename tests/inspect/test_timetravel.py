"""Time travel: restore any checkpointed step, replay it bitwise, capture and poke modules."""

from __future__ import annotations

import numpy as np
import pytest
from theseus.core.inspect import open_step
from theseus.core.inspect.timetravel import InspectError

from tests.train.conftest import pretrain_tiny, run_cli, train_losses

RUN = "travel"


@pytest.fixture(scope="module")
def travelled(tmp_path_factory):
    root = tmp_path_factory.mktemp("travel")
    pretrain_tiny(
        root, RUN, "training.total_steps=6", "checkpoint.every=2", "checkpoint.keep_last=5"
    )
    return root


@pytest.mark.parametrize("step", [2, 4])
def test_replay_reproduces_the_logged_loss_bitwise(travelled, step):
    moment = open_step(travelled, RUN, step)
    replayed = moment.replay()
    assert replayed["loss"] == train_losses(travelled, RUN)[step]
    norms = [
        float(np.linalg.norm(np.asarray(g)))
        for g in __import__("jax").tree.leaves(replayed["grads"])
    ]
    assert np.isclose(np.sqrt(sum(n * n for n in norms)), replayed["grad_norm"], rtol=1e-5)


def test_the_batch_of_a_step_is_the_one_training_saw(travelled):
    a = open_step(travelled, RUN, 2).batch()
    b = open_step(travelled, RUN, 4).batch()
    assert a["inputs"].shape == (4, 32) and not np.array_equal(a["inputs"], b["inputs"])
    assert np.array_equal(open_step(travelled, RUN, 2).batch()["inputs"], a["inputs"])


def test_capture_a_module_and_rerun_it_eagerly_with_shared_parameters(travelled):
    moment = open_step(travelled, RUN, 4)
    captures = moment.capture(["blocks.1.mlp"])
    capture = captures["blocks.1.mlp"]
    assert capture.type == "MLP" and capture.output.shape == (4, 32, 64)
    module = moment.module("blocks.1.mlp")
    again = module(*capture.args, **capture.kwargs)
    np.testing.assert_array_equal(np.asarray(again), np.asarray(capture.output))
    # the module's weights are the checkpoint's: layer 1 of the stacked blocks (a slice, so
    # equal values); outside the blocks, the checkpoint's arrays themselves, not copies
    kernel = module.up_proj.kernel.get_value()
    stacked = moment.state.params["blocks"]["mlp"]["up_proj"]["kernel"].get_value()
    assert stacked.shape == (2, *kernel.shape)
    np.testing.assert_array_equal(np.asarray(kernel), np.asarray(stacked[1]))
    assert not np.array_equal(np.asarray(kernel), np.asarray(stacked[0]))
    scale = moment.module("final_norm").scale.get_value()
    assert scale is moment.state.params["final_norm"]["scale"].get_value()
    # a step's model differs from another step's: travel is real
    other = open_step(travelled, RUN, 2).capture(["blocks.1.mlp"])["blocks.1.mlp"]
    assert not np.allclose(np.asarray(other.output), np.asarray(capture.output))


def test_capture_every_module_of_a_type(travelled):
    captures = open_step(travelled, RUN, 2).capture(type_name="LayerNorm")
    assert sorted(captures) == [
        "blocks.0.attn_norm",
        "blocks.0.mlp_norm",
        "blocks.1.attn_norm",
        "blocks.1.mlp_norm",
        "final_norm",
    ]
    assert all(c.output.shape == (4, 32, 64) for c in captures.values())


def test_a_step_without_checkpoint_names_the_nearest(travelled):
    with pytest.raises(
        InspectError, match="no checkpoint at step 3; nearest checkpointed steps: 2, 4"
    ):
        open_step(travelled, RUN, 3)


def test_an_unknown_module_suggests_the_closest(travelled):
    with pytest.raises(InspectError, match="no module 'blocks.1.mpl'.*did you mean 'blocks.1.mlp'"):
        open_step(travelled, RUN, 2).module("blocks.1.mpl")


def test_inspect_cli_lists_modules_and_writes_npz(travelled, tmp_path):
    listed = run_cli(travelled, "inspect", RUN, "--step", "4", "--list", "--replay")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "blocks.1.mlp  MLP  (4, 32, 64)" in listed.stdout
    assert f"step 4: loss {train_losses(travelled, RUN)[4]!r}" in listed.stdout
    out = tmp_path / "acts.npz"
    written = run_cli(
        travelled,
        "inspect",
        RUN,
        "--step",
        "4",
        "--module",
        "blocks.0.attn_norm",
        "--out",
        str(out),
    )
    assert written.returncode == 0, written.stderr[-2000:]
    arrays = np.load(out)
    assert arrays["blocks.0.attn_norm/output"].shape == (4, 32, 64)
    assert arrays["blocks.0.attn_norm/input0"].shape == (4, 32, 64)
    bad = run_cli(travelled, "inspect", RUN, "--step", "5", "--list")
    assert bad.returncode == 2 and "nearest checkpointed steps: 4, 6" in bad.stderr
