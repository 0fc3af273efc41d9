"""Every real-size preset is the published model, vocabulary included: its parameter count,
from shapes only (``nnx.eval_shape``, nothing allocated), is the published one within 0.1%,
the dry run plans it, and data tokenized with another vocabulary is refused in one line."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import pytest
from flax import nnx
from theseus.core.errors import ConfigError
from theseus.models.families import FAMILIES, family_named

# (family, preset, published parameter count, where it is published). Tied embeddings count
# once; the counts are the Hub's safetensors totals unless the row says otherwise.
PUBLISHED = [
    # GPT2LMHeadModel.num_parameters() (the Hub's 137M for gpt2 adds the causal-mask
    # buffers); keras-hub's gpt2 presets list the same four counts
    ("gpt", "124m", 124_439_808, "openai-community/gpt2"),
    ("gpt", "350m", 354_823_168, "openai-community/gpt2-medium"),
    ("gpt", "774m", 774_030_080, "openai-community/gpt2-large"),
    ("gpt", "1.5b", 1_557_611_200, "openai-community/gpt2-xl"),
    ("llama", "1b", 1_235_814_400, "meta-llama/Llama-3.2-1B"),
    ("llama", "8b", 8_030_261_248, "meta-llama/Llama-3.1-8B"),
    ("llama", "70b", 70_553_706_496, "meta-llama/Llama-3.1-70B"),
    ("qwen2", "0.5b", 494_032_768, "Qwen/Qwen2.5-0.5B"),
    ("qwen2", "7b", 7_615_616_512, "Qwen/Qwen2.5-7B"),
    # keras-hub qwen3_0.6b_en (the Hub's 0.8B stores the tied head a second time)
    ("qwen3", "0.6b", 596_049_920, "Qwen/Qwen3-0.6B"),
    ("qwen3", "8b", 8_190_735_360, "Qwen/Qwen3-8B"),
    ("qwen3_moe", "30b-a3b", 30_532_122_624, "Qwen/Qwen3-30B-A3B"),
    ("mistral", "7b", 7_241_732_096, "mistralai/Mistral-7B-v0.1"),
    ("mistral", "7b-v0.3", 7_248_023_552, "mistralai/Mistral-7B-v0.3"),
    ("mixtral", "8x7b", 46_702_792_704, "mistralai/Mixtral-8x7B-v0.1"),
    ("gemma3", "1b", 999_885_952, "google/gemma-3-1b-pt"),
    # keras-hub gemma3_4b_text, whose embedding has 262,144 rows; the checkpoint's
    # text_config has 262,208 (163,840 parameters more, 0.004%)
    ("gemma3", "4b", 3_880_099_328, "google/gemma-3-4b-pt, its language model"),
    # no exact count is published (the model card says 16B): counted by hand from its
    # config.json (embedding and head, 1 dense layer, 26 MoE layers with the routing biases)
    ("deepseek_v3", "moonlight-16b-a3b", 15_960_110_208, "moonshotai/Moonlight-16B-A3B"),
    # DeepSeek's README: 671B main model weights plus 14B of the MTP module, left out here
    ("deepseek_v3", "671b", 671_026_419_200, "deepseek-ai/DeepSeek-V3"),
]


def parameters(family: str, preset: str) -> int:
    """The parameter count of ``family``'s ``preset``, from abstract shapes."""
    spec = family_named(family)
    config = spec.config(preset=preset, **spec.presets[preset])
    model = nnx.eval_shape(lambda: spec.load_model()(config, rngs=nnx.Rngs(params=0)))
    return sum(math.prod(v.shape) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param)))


@pytest.mark.parametrize(("family", "preset", "count", "source"), PUBLISHED)
def test_a_real_size_preset_has_the_published_parameter_count(family, preset, count, source):
    ours = parameters(family, preset)
    assert abs(ours - count) <= count // 1000, f"{family} {preset}: {ours:,} vs {source} {count:,}"


def test_every_real_size_preset_is_checked_and_carries_its_vocabulary():
    checked = {(family, preset) for family, preset, _, _ in PUBLISHED}
    for spec in FAMILIES:
        for preset, values in spec.presets.items():
            if preset == "tiny":
                continue
            assert (spec.name, preset) in checked, f"{spec.name} {preset}: no published count"
            assert values.get("vocab_size", 0) > 0, f"{spec.name} {preset}: no vocabulary"
            assert "tie_embeddings" in values, f"{spec.name} {preset}: tied or not?"


def train_config(root: Path, *overrides: str) -> Any:
    """The typed config of ``llama/train/pretrain`` as the CLI resolves it."""
    from theseus.core.runner import prepare

    return prepare("llama/train/pretrain", list(overrides), root=root).typed_config()


def test_the_dry_run_plans_the_published_llama_8b(root):
    """The dry run's vocabulary and setup (no compile): 8.03B parameters, not 7.05B."""
    from theseus.core.plan.dry_run import vocab_size
    from theseus.core.plugins import registries
    from theseus.core.train.setup import TrainSetup

    config = train_config(root, "model.preset=8b")
    vocab, _ = vocab_size(config, str(root))
    assert vocab == 128256
    state = TrainSetup.build(config, registries(), vocab).abstract_state
    assert sum(math.prod(a.shape) for a in jax.tree.leaves(state.params)) == 8_030_261_248


def test_a_preset_vocabulary_the_tokenizer_lacks_is_refused(root):
    from theseus.core.plugins import registries
    from theseus.core.train.setup import TrainSetup

    config = train_config(root, "model.preset=1b")
    with pytest.raises(ConfigError) as refused:
        TrainSetup.build(config, registries(), 8192)  # the default BPE's vocabulary
    message = str(refused.value)
    assert "\n" not in message
    for part in ("model.preset=1b", "128256", "data.tokenizer=bpe has 8192", "vocab_size=8192"):
        assert part in message, message


def test_a_vocabulary_given_explicitly_trains_that_vocabulary(root):
    from theseus.core.plugins import registries
    from theseus.core.train.setup import model_config

    config = train_config(root, "model.preset=1b", "model.vocab_size=8192")
    assert model_config(config, 8192, registries()).vocab_size == 8192
    with pytest.raises(ConfigError, match="model.vocab_size=8192 disagrees with the tokenizer"):
        model_config(config, 384, registries())


def test_the_run_refuses_in_one_line_after_tokenizing(root):
    """Through the CLI: a 384-token BPE under the 1B preset is refused, exit 2."""
    args = [
        "model.preset=1b",
        "training.seq_len=32",
        "training.global_batch_size=4",
        "data.max_documents=24",
        "data.vocab_size=384",
        "data.num_workers=1",
        "logging.progress=false",
    ]
    command = [sys.executable, "-m", "theseus.cli.main", "run", "llama/train/pretrain", *args]
    done = subprocess.run(
        [*command, "--root", str(root)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: model.preset=1b is the published model"), last
    assert "data.tokenizer=bpe has 384 tokens" in last and "model.vocab_size=384" in last
