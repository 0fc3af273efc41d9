"""Tunix 0.1.7's GRPO on a Hugging Face folder, timed per step, for a comparison with theseus.

Run where Tunix and what its GRPO path imports are installed (bench/tunix_install.sh, then
PYTHONPATH=$PYTHONPATH:/tmp/tunix-site), on a folder as theseus's `hf/export` writes it
(config.json, model.safetensors, tokenizer.json; Qwen3ForCausalLM or LlamaForCausalLM):

    python3 bench/tunix_grpo.py HF_DIR --rows 128 --generations 8 --new-tokens 512 \
        --steps 5 --warmup 2 --out result.json

What runs is Tunix's own: its safetensors loader (tunix.models.{qwen3,llama3}.params), its
Sampler behind RLCluster's "vanilla" rollout engine, and GRPOLearner (beta 0: no reference
model; one iteration per batch: no old-policy pass) with an AdamW optimizer of a fixed
learning rate. Actor and rollout share one mesh, so they share the weights (Tunix then syncs
nothing between steps). The end token never stops a rollout: the tokenizer's end id is the
vocabulary size, an id no sampled token can take, so every completion has --new-tokens tokens.

Times come from Tunix's own perf tracer (tunix.perf.trace, PerfMetricsConfig's export
function): per global step, the main thread's "global_step" span group (step_s), the device
span "rollout" (sample_s) and the "actor_training" span group (learn_s: the policy's forward,
backward and AdamW update over the step's micro-batches, host work included), and the device
spans "peft_train_step" summed (learn_device_s). Wall clocks around RLCluster.generate and
RLCluster.update_actor are kept beside them as a check. The first --warmup steps (compilation)
are left out of the means.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

TUNIX_VERSION = "0.1.7"


def load_tunix_package() -> None:
    """Registers `tunix` as a bare package, so its submodules import without its __init__.

    tunix/__init__.py imports every trainer Tunix has (distillation, DPO, PPO, agentic RL and
    tunix.perf.export, which needs the perfetto package); GRPO needs none of them.
    """
    spec = importlib.util.find_spec("tunix")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "tunix_grpo: the package tunix is not on PYTHONPATH (bench/tunix_install.sh installs it)"
        )
    package = types.ModuleType("tunix")
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    package.__version__ = importlib.metadata.version("google-tunix")
    sys.modules["tunix"] = package


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hf_dir", type=Path, help="config.json + *.safetensors + tokenizer.json")
    parser.add_argument("--rows", type=int, default=128, help="completions per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--new-tokens", type=int, default=512, help="tokens per completion")
    parser.add_argument(
        "--prompt-len", type=int, default=0, help="prompts left-padded to this; 0: the longest"
    )
    parser.add_argument("--steps", type=int, default=5, help="GRPO steps, warmup included")
    parser.add_argument("--warmup", type=int, default=2, help="first steps left out (compiling)")
    parser.add_argument("--learning-rate", type=float, default=1e-6)
    parser.add_argument(
        "--param-dtype",
        choices=["bfloat16", "float32"],
        default="bfloat16",
        help="weights and so AdamW state (Tunix's Llama3 computes in its weights' dtype)",
    )
    parser.add_argument(
        "--train-micro-prompts",
        type=int,
        default=1,
        help="prompts per training micro-batch (x generations rows; Tunix's smallest is 1)",
    )
    parser.add_argument(
        "--rollout-micro-prompts",
        type=int,
        default=0,
        help="prompts per rollout call (x generations rows); 0: the most whose KV cache "
        "fits --kv-budget-gib",
    )
    parser.add_argument(
        "--kv-budget-gib",
        type=float,
        default=4.5,
        help="KV cache of one rollout call, for --rollout-micro-prompts 0 (a v5e chip: 4.5)",
    )
    parser.add_argument(
        "--remat", choices=["none", "block", "decoder"], default="none", help="Tunix RematConfig"
    )
    parser.add_argument("--out", type=Path, required=True, help="where the JSON result goes")
    args = parser.parse_args(argv)
    if args.rows % args.generations:
        parser.error(f"--rows {args.rows} is not a multiple of --generations {args.generations}")
    if args.steps <= args.warmup:
        parser.error(f"--steps {args.steps} leaves no step after --warmup {args.warmup}")
    return args


class FileTokenizer:
    """A tokenizer.json behind the methods Tunix's TokenizerAdapter asks of a custom tokenizer.

    encode/decode use the `tokenizers` library. bos_id() is 0 (falsy: the sampler prepends
    nothing, the prompts carry their own header); eos_id() is `never_id`, which no sampled
    token can equal; pad_id() is the folder's pad (else end) token.
    """

    def __init__(self, path: Path, pad: int, never_id: int) -> None:
        import tokenizers

        self._tokenizer = tokenizers.Tokenizer.from_file(str(path))
        self._pad = pad
        self._never = never_id

    def encode(self, text: str, **_: Any) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int], **_: Any) -> str:
        return self._tokenizer.decode([i for i in ids if i != self._never])

    def bos_id(self) -> int:
        return 0

    def eos_id(self) -> int:
        return self._never

    def pad_id(self) -> int:
        return self._pad


def addition_prompts(count: int) -> tuple[list[str], list[str]]:
    """Fixed addition chats in theseus's SFT template, and their answers."""
    prompts, answers = [], []
    for i in range(count):
        a, b = 10 + (37 * i) % 90, 10 + (59 * i + 13) % 90
        prompts.append(f"<|user|>What is {a}+{b}? Reply with the sum only.<|end|><|assistant|>")
        answers.append(str(a + b))
    return prompts, answers


def addition_reward(prompts: list[str], completions: list[str], answer: list[str], **_: Any):
    """1 when the completion starts with the right sum, plus the share of digits in it."""
    rewards = []
    for completion, expected in zip(completions, answer, strict=True):
        text = completion.strip()
        digits = sum(ch.isdigit() for ch in text) / max(len(text), 1)
        rewards.append(float(text.startswith(str(expected))) + digits)
    return rewards


def read_config(hf_dir: Path) -> dict[str, Any]:
    config_path = hf_dir / "config.json"
    if not config_path.is_file():
        raise SystemExit(f"tunix_grpo: {config_path} is missing")
    return json.loads(config_path.read_text())


def build_model(hf_dir: Path, hf: dict[str, Any], mesh, param_dtype, remat: str, notes: list):
    """Tunix's model config from config.json, and the weights through Tunix's loader."""
    import jax.numpy as jnp

    architecture = hf["architectures"][0]
    common = dict(
        num_layers=hf["num_hidden_layers"],
        vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"],
        hidden_dim=hf["intermediate_size"],
        num_heads=hf["num_attention_heads"],
        head_dim=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        num_kv_heads=hf["num_key_value_heads"],
        rope_theta=int(hf.get("rope_theta") or hf["rope_parameters"]["rope_theta"]),
        norm_eps=hf["rms_norm_eps"],
    )
    tied = bool(hf.get("tie_word_embeddings", False))
    if hf.get("rope_scaling"):
        notes.append(f"config.json's rope_scaling {hf['rope_scaling']} is not applied by Tunix")
    if architecture == "Qwen3ForCausalLM":
        from tunix.models.qwen3 import model as model_lib
        from tunix.models.qwen3 import params as params_lib

        config = model_lib.ModelConfig(
            **common,
            use_tied_embedding=tied,
            dtype=jnp.bfloat16,
            param_dtype=param_dtype,
            remat_config=model_lib.RematConfig[remat.upper()],
        )
        notes.append("Qwen3: computes in bfloat16 (ModelConfig.dtype), softmax and norms float32")
    elif architecture == "LlamaForCausalLM":
        from tunix.models.llama3 import model as model_lib
        from tunix.models.llama3 import params as params_lib

        config = model_lib.ModelConfig(
            **common, weight_tying=tied, remat_config=model_lib.RematConfig[remat.upper()]
        )
        notes.append("Llama3: Tunix's Llama computes in its weights' dtype (no separate dtype)")
    else:
        raise SystemExit(f"tunix_grpo: architecture {architecture} is neither Qwen3 nor Llama")
    with mesh:  # as tunix.models.automodel loads them
        model = params_lib.create_model_from_safe_tensors(
            str(hf_dir), config, mesh, dtype=param_dtype
        )
    return model, architecture


def model_kv_bytes_per_token(hf: dict[str, Any]) -> int:
    """Bytes of bfloat16 keys and values one token takes in Tunix's KV cache."""
    head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    return hf["num_hidden_layers"] * 2 * hf["num_key_value_heads"] * head_dim * 2


def prompts_per_rollout_call(prompts: int, generations: int, row_bytes: int, budget: float) -> int:
    """The most prompts (a divisor of `prompts`) whose rows' KV cache fits `budget` bytes.

    Tunix's sampler holds the KV cache of a whole call, and its decode loop a copy as large:
    on a v5e chip (15.75 GiB) XLA refused 128 rows x 552 tokens of Qwen3-0.6B (8.1 GiB of
    cache) and 64 x 1064, and compiled 64 x 552 and 32 x 1064 (3.8 GiB, peak 8.3 GiB).
    """
    fitting = [n for n in range(1, prompts + 1) if prompts % n == 0]
    fitting = [n for n in fitting if n * generations * row_bytes <= budget]
    return max(fitting, default=1)


class StepTimes:
    """Per global step, the spans Tunix's perf tracer recorded (an export function for it)."""

    def __init__(self, device_timeline: str, on_step) -> None:
        self.device_timeline = device_timeline
        self.on_step = on_step  # called after each step (the harness writes its JSON so far)
        self.tracer = None
        self.steps: list[dict[str, float]] = []

    def __call__(self, query) -> dict:
        from tunix.perf import span as span_lib

        if self.tracer is not None:
            self.tracer.synchronize()  # device spans end on helper threads
        step = query().main().last_group("global_step").get()[0]
        device = query().timeline(self.device_timeline).last_group("global_step").get()[0]
        training = query().main().last_group("global_step").all_groups("mini_batch_step")
        training = training.all_groups("micro_batch_steps").all_groups("actor_training").get()

        def spans(group, name: str) -> list[float]:
            found = []
            for item in group.inner:
                if isinstance(item, span_lib.SpanGroup):
                    found += spans(item, name)
                elif item.name == name:
                    found.append(item.duration)
            return found

        self.steps.append(
            {
                "step_s": step.duration,
                "sample_s": sum(spans(device, "rollout")),
                "learn_s": sum(group.duration for group in training),
                "learn_device_s": sum(spans(device, "peft_train_step")),
                "train_micro_steps": len(spans(device, "peft_train_step")),
            }
        )
        self.on_step(self.steps)
        return {}


def wrap_wall_clocks(rl_cluster, record: dict[str, list]) -> None:
    """Wall clocks around RLCluster.generate and update_actor (instance attributes)."""
    import jax

    generate, update_actor = rl_cluster.generate, rl_cluster.update_actor

    def timed_generate(*args, **kwargs):
        begin = time.perf_counter()
        output = generate(*args, **kwargs)
        record["generate_s"].append(time.perf_counter() - begin)
        record["lengths"].append([len(tokens) for tokens in output.tokens])
        return output

    def timed_update_actor(*args, **kwargs):
        begin = time.perf_counter()
        result = update_actor(*args, **kwargs)
        jax.block_until_ready(jax.tree.leaves(rl_cluster.actor_trainer.model))
        record["update_s"].append(time.perf_counter() - begin)
        return result

    rl_cluster.generate = timed_generate
    rl_cluster.update_actor = timed_update_actor


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def per_step_mean(calls: list[float], steps: int, warmup: int) -> float:
    """The mean over the measured steps of the summed times of each step's calls."""
    per_step = len(calls) // steps
    sums = [sum(calls[i * per_step : (i + 1) * per_step]) for i in range(steps)]
    return mean(sums[warmup:])


def run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    load_tunix_package()
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from tunix.perf import metrics as perf_metrics
    from tunix.perf import trace as perf_trace
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    notes: list[str] = result["notes"]
    hf = read_config(args.hf_dir)
    param_dtype = jnp.bfloat16 if args.param_dtype == "bfloat16" else jnp.float32
    device = jax.devices()[0]
    result["device"] = f"{device.platform}:{device.device_kind}"
    # Auto axes, as tunix.utils.mesh makes them (jax.make_mesh's default is Explicit now).
    auto = (jax.sharding.AxisType.Auto,) * 2
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=auto)
    begin = time.perf_counter()
    model, architecture = build_model(args.hf_dir, hf, mesh, param_dtype, args.remat, notes)
    result["load_s"] = time.perf_counter() - begin
    result["architecture"] = architecture
    vocab = int(hf["vocab_size"])
    pad = hf.get("pad_token_id")
    pad = int(pad if pad is not None else hf.get("eos_token_id") or 0)
    tokenizer = FileTokenizer(args.hf_dir / "tokenizer.json", pad=pad, never_id=vocab)

    prompt_count = args.rows // args.generations
    prompts, answers = addition_prompts(prompt_count)
    prompt_lengths = [len(tokenizer.encode(p)) for p in prompts]
    prompt_len = args.prompt_len or max(prompt_lengths)
    if max(prompt_lengths) > prompt_len:
        raise SystemExit(
            f"tunix_grpo: prompts take up to {max(prompt_lengths)} tokens, over --prompt-len"
        )
    result["prompt_len"] = prompt_len
    result["prompt_tokens"] = [min(prompt_lengths), max(prompt_lengths)]

    rollout_config = base_rollout.RolloutConfig(
        max_tokens_to_generate=args.new_tokens,
        max_prompt_length=prompt_len,
        kv_cache_size=prompt_len + args.new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=None,
        eos_tokens=[vocab],
    )
    train_micro = args.train_micro_prompts
    kv_bytes_per_row = (prompt_len + args.new_tokens) * model_kv_bytes_per_token(hf)
    rollout_micro = args.rollout_micro_prompts or prompts_per_rollout_call(
        prompt_count, args.generations, kv_bytes_per_row, args.kv_budget_gib * 2**30
    )
    result.update(
        train_micro_prompts=train_micro,
        rollout_micro_prompts=rollout_micro,
        remat=args.remat,
        param_dtype=args.param_dtype,
    )
    for name, value in (("train", train_micro), ("rollout", rollout_micro)):
        if prompt_count % value:
            raise SystemExit(
                f"tunix_grpo: --{name}-micro-prompts {value} does not divide {prompt_count} prompts"
            )
    # theseus's AdamW defaults: b2 0.95, decoupled weight decay 0.1, global-norm clip 1.
    optimizer = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(args.learning_rate, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1),
    )
    training_config = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=optimizer,
        eval_every_n_steps=10**9,
        max_steps=args.steps,
        mini_batch_size=prompt_count,
        train_micro_batch_size=train_micro,
        rollout_micro_batch_size=rollout_micro,
        compute_logps_micro_batch_size=train_micro,
        pbar_description=None,
    )
    cluster_config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={
            rl_cluster_lib.Role.ACTOR: mesh,
            rl_cluster_lib.Role.REFERENCE: mesh,
            rl_cluster_lib.Role.ROLLOUT: mesh,
        },
        rollout_engine="vanilla",
        offload_to_cpu=False,
        training_config=training_config,
        rollout_config=rollout_config,
    )

    def write_so_far(steps: list[dict[str, float]]) -> None:
        write_result(args.out, {**result, "per_step": steps, "partial": f"{len(steps)} steps"})

    times = StepTimes(perf_trace.create_device_timeline_id(device), write_so_far)
    cluster = rl_cluster_lib.RLCluster(
        actor=model,
        reference=None,
        tokenizer=tokenizer,
        cluster_config=cluster_config,
        perf_config=perf_metrics.PerfMetricsConfig(custom_export_fn=times),
    )
    times.tracer = cluster.perf
    walls: dict[str, list] = {"generate_s": [], "update_s": [], "lengths": []}
    wrap_wall_clocks(cluster, walls)
    algo_config = grpo_learner.GRPOConfig(
        num_generations=args.generations,
        num_iterations=1,
        beta=0.0,
        epsilon=0.2,
        loss_algo="grpo",
    )
    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster, algo_config=algo_config, reward_fns=[addition_reward]
    )
    batch = {"prompts": np.array(prompts), "answer": np.array(answers)}
    dataset = [dict(batch) for _ in range(args.steps)]
    begin = time.perf_counter()
    learner.train(dataset)
    result["train_wall_s"] = time.perf_counter() - begin

    if len(times.steps) != args.steps:
        raise RuntimeError(f"Tunix's tracer recorded {len(times.steps)} of {args.steps} steps")
    measured = times.steps[args.warmup :]
    for key in ("step_s", "sample_s", "learn_s", "learn_device_s"):
        result[key] = mean([step[key] for step in measured])
    result["per_step"] = times.steps
    result["decode_tokens_per_s"] = args.rows * args.new_tokens / result["sample_s"]
    lengths = [n for step in walls["lengths"] for n in step]
    result["completion_tokens"] = [min(lengths), max(lengths)]
    result["wall_generate_s"] = per_step_mean(walls["generate_s"], args.steps, args.warmup)
    result["wall_update_s"] = per_step_mean(walls["update_s"], args.steps, args.warmup)
    result["rollout_calls_per_step"] = len(walls["generate_s"]) // args.steps
    result["train_micro_steps_per_step"] = measured[0]["train_micro_steps"]
    if min(lengths) != args.new_tokens:
        notes.append(f"some completions stopped early: lengths {min(lengths)}..{max(lengths)}")
    notes += [
        "times: Tunix's perf tracer (step_s: global_step group; sample_s: rollout device span; "
        "learn_s: actor_training group; learn_device_s: peft_train_step device spans); "
        "wall_generate_s/wall_update_s: wall clocks around RLCluster.generate/update_actor",
        f"GRPO: beta 0 (no reference model), 1 iteration, epsilon 0.2, loss 'grpo' "
        f"(sequence-mean-token-mean); AdamW lr {args.learning_rate} fixed, b2 0.95, wd 0.1 "
        "(on every weight), global-norm clip 1",
        f"weights {args.param_dtype}; AdamW moments in the weights' dtype; KV cache in the "
        "compute dtype",
        f"sampling: temperature 1.0, no top-k/top-p (jax.random.categorical); "
        f"end id {vocab} (= vocab size) so no rollout stops early; pad id {pad}",
        "rewards: 1 if the completion starts with the right sum, plus its share of digits",
        f"prompts: {prompt_count} addition chats left-padded to {prompt_len} tokens; "
        f"training micro-batch {train_micro} prompts, rollout call {rollout_micro} prompts",
    ]


def write_result(out: Path, result: dict[str, Any]) -> None:
    """Whole or not at all (a run killed by a timeout keeps the last steps' file)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".tmp")
    partial.write_text(json.dumps(result, indent=1, default=str) + "\n")
    os.replace(partial, out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result: dict[str, Any] = {
        "name": "tunix",
        "version": TUNIX_VERSION,
        "hf_dir": str(args.hf_dir),
        "rows": args.rows,
        "generations": args.generations,
        "new_tokens": args.new_tokens,
        "prompt_len": args.prompt_len,
        "steps": args.steps,
        "warmup": args.warmup,
        "notes": [],
    }
    status = 0
    try:
        run(args, result)
    except SystemExit:
        raise
    except BaseException as error:  # the JSON says what stopped it
        result["error"] = f"{type(error).__name__}: {error}"[:2000]
        result["traceback"] = traceback.format_exc()[-4000:]
        status = 1
    write_result(args.out, result)
    summary = {k: result.get(k) for k in ("step_s", "sample_s", "learn_s", "decode_tokens_per_s")}
    print(f"tunix_grpo: {json.dumps(summary)} {result.get('error', '')} -> {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
