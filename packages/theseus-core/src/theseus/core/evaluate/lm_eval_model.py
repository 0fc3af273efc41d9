"""theseus models as an lm-evaluation-harness model, registered as ``theseus``.

Importing this module registers :class:`TheseusLM` in ``lm_eval``'s model registry (it
needs ``lm_eval``: ``pip install 'theseus-core[lm-eval]'``). lm-eval 0.4 discovers no
third-party models by itself, so go through :mod:`theseus.core.evaluate.harness`
(``theseus lm-eval ...``, ``python -m theseus.core.evaluate.harness ...`` or its
``evaluate()``), which imports this module first.

``--model_args``: ``run=RUN[@STEP]`` (latest checkpoint when no step) with ``root=ROOT``
(default ``$THESEUS_ROOT``, else ``./runs``), or ``hf_dir=DIR`` (``tokenizer=`` a
tokenizer.json, default ``DIR/tokenizer.json``); ``sharding=fsdp|tp|fsdp+tp|dp`` lays
the parameters out over all visible devices (default: the run's own strategy; replicated
for ``hf_dir``); ``max_gen_toks`` (256) and ``padding_side`` (right). Scores come from
:class:`theseus.core.evaluate.scoring.Scorer`, the built-in evaluations' scorer, and
generation from the ``theseus_generate`` hook (KV-cache greedy decoding in
theseus-models), so built-in and harness numbers are computed by the same code.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import jax
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from theseus.core.evaluate.errors import EvaluationError
from theseus.core.evaluate.target import SPECIAL_TOKENS, EvalTarget, checkpoint_target, hf_target
from theseus.core.plugins import registries
from theseus.core.runner import default_root
from theseus.core.sharding.config import ShardingConfig
from theseus.core.sharding.placement import Layout
from tqdm import tqdm

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")
CHUNK = 64  # batches scored between two progress-bar updates


def _batch_size(value: Any) -> int:
    """lm-eval passes ``--batch_size`` as given: ``8``, ``"8"``, ``"auto"`` or ``"auto:4"``."""
    if value is None or str(value).startswith("auto"):
        if value is not None:
            log.warning("batch_size=%s: the theseus model uses a fixed batch size; 8", value)
        return 8
    return int(value)


def on_jax_backend(device: str) -> bool:
    """Whether lm-eval's ``device`` (``cpu``, ``cuda:0``, ``tpu``...) names JAX's backend."""
    backend = jax.default_backend()
    kind = device.split(":", 1)[0].strip().lower()
    return kind == backend or (backend == "gpu" and kind == "cuda")


def load_target(
    run: str = "",
    root: str = "",
    hf_dir: str = "",
    tokenizer: str = "",
    sharding: str = "",
    batch_size: int = 8,
    padding_side: str = "right",
) -> tuple[EvalTarget, dict]:
    """The evaluation target named by the model args, laid out by ``sharding``."""

    if bool(run) == bool(hf_dir):
        raise EvaluationError(
            "the theseus model needs exactly one of run=RUN[@STEP] (with root=ROOT) and "
            "hf_dir=DIR in --model_args"
        )
    if run:
        overrides = [f"sharding.strategy={sharding}"] if sharding else []
        return checkpoint_target(
            root or default_root(),
            run,
            overrides=overrides,
            what="run",
            batch_size=batch_size,
            padding_side=padding_side,
        )
    target, source = hf_target(
        hf_dir, tokenizer, root=root or ".", batch_size=batch_size, padding_side=padding_side
    )
    if sharding:
        target.model = place(target.model, sharding)
    return target, source


def place(model: Any, strategy: str) -> Any:
    """``model`` with its parameters laid out by ``strategy`` on all visible devices."""
    from flax import nnx

    layout = Layout(ShardingConfig(strategy=strategy))
    graphdef, state = nnx.split(model)
    state = jax.device_put(state, layout.shardings(layout.param_specs(state)))
    log.info("parameters laid out by %s on mesh %s", strategy, dict(layout.mesh.shape))
    return nnx.merge(graphdef, state)


def layout_of(model: Any) -> dict[str, int]:
    """How the model's parameters lie: arrays, how many are split, devices they span."""
    from flax import nnx

    arrays = [x for x in jax.tree.leaves(nnx.state(model)) if hasattr(x, "sharding")]
    devices = {d for x in arrays for d in x.sharding.device_set}
    sharded = sum(not x.sharding.is_fully_replicated for x in arrays)
    return {"arrays": len(arrays), "sharded": sharded, "devices": len(devices)}


@register_model("theseus")
class TheseusLM(TemplateLM):
    """A theseus checkpoint or imported Hugging Face weights, for lm-evaluation-harness."""

    def __init__(
        self,
        run: str = "",
        root: str = "",
        hf_dir: str = "",
        tokenizer: str = "",
        sharding: str = "",
        batch_size: Any = 8,
        max_gen_toks: int = 256,
        padding_side: str = "right",
        target: EvalTarget | None = None,
        max_batch_size: Any = None,
        device: Any = None,
        trust_remote_code: Any = None,
        **unknown: Any,
    ) -> None:
        super().__init__()
        if unknown:
            raise EvaluationError(
                f"the theseus model has no argument(s) {', '.join(sorted(unknown))} (known: run, "
                "root, hf_dir, tokenizer, sharding, batch_size, max_gen_toks, padding_side)"
            )
        if device and not on_jax_backend(str(device)):
            log.info(
                "device=%s is ignored: JAX places the model on its devices (%s)",
                device,
                jax.default_backend(),
            )
        if target is None:
            target, self.source = load_target(
                str(run), str(root), str(hf_dir), str(tokenizer), str(sharding),
                _batch_size(batch_size), str(padding_side),
            )  # fmt: skip
        else:  # an already opened model (the evaluate job, evaluations during training)
            self.source = {}
        self.target = target
        self.layout = layout_of(target.model)
        log.info(
            "theseus model %s: %d of %d parameter arrays sharded over %d device(s)",
            self.source or "(opened)",
            self.layout["sharded"],
            self.layout["arrays"],
            self.layout["devices"],
        )
        self.batch_size = target.batch_size
        self.max_gen_toks = int(max_gen_toks)
        self.tokenizer = target.tokenizer  # TemplateLM reads it for chat templates
        specials = {}
        for token in SPECIAL_TOKENS:
            found = target.tokenizer.special_id(token)
            if found is not None:
                specials[token] = found
        self._specials = specials
        self._special_re = (
            re.compile("(" + "|".join(re.escape(t) for t in specials) + ")") if specials else None
        )

    # ------------------------------------------------------------------ tokens
    @property
    def eot_token_id(self) -> int:
        return self.target.tokenizer.eos_id

    @property
    def max_length(self) -> int:
        return self.target.max_len

    @property
    def tokenizer_name(self) -> str:
        return "theseus:" + ",".join(f"{k}={v}" for k, v in sorted(self.source.items()))

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **_: Any) -> list:
        """Text to ids; special-token text (``<|end|>``, ...) becomes its special id."""
        encode = self.target.tokenizer.encode
        if self._special_re is None:
            return list(encode(string))
        ids: list[int] = []
        for part in self._special_re.split(string):
            if part in self._specials:
                ids.append(self._specials[part])
            elif part:
                ids += list(encode(part))
        return ids

    def tok_decode(self, ids: list[int]) -> str:
        return self.target.tokenizer.decode(ids)

    def chat_template(self, chat_template: bool | str = False) -> str:
        return "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """The SFT data's template: ``<|role|>content<|end|>`` per turn, then
        ``<|assistant|>`` when the model is to answer."""
        parts = []
        for message in chat_history:
            if message["role"] not in ROLES:
                raise EvaluationError(f"chat role {message['role']!r} is not one of {ROLES}")
            parts.append(f"<|{message['role']}|>{message['content']}<|end|>")
        if add_generation_prompt:
            parts.append("<|assistant|>")
        return "".join(parts)

    # ------------------------------------------------------------------ scoring
    def _score(self, pairs: list[tuple[list[int], list[int]]], desc: str, quiet: bool) -> list:
        """``(log-likelihood, greedy)`` of each (context ids, continuation ids), scored by the
        built-in evaluations' scorer, longest first, with a progress bar."""
        scorer = self.target.scorer
        order = sorted(range(len(pairs)), key=lambda i: (-len(pairs[i][0]) - len(pairs[i][1]), i))
        out: list[Any] = [None] * len(pairs)
        step = CHUNK * self.batch_size
        with tqdm(total=len(pairs), desc=desc, disable=quiet or not pairs) as bar:
            for start in range(0, len(order), step):
                picked = order[start : start + step]
                scored = scorer.loglikelihood([pairs[i] for i in picked])
                for i, (logp, greedy, _) in zip(picked, scored, strict=True):
                    out[i] = (logp, greedy)
                bar.update(len(picked))
        return out

    def _loglikelihood_tokens(self, requests: list, disable_tqdm: bool = False, **_: Any) -> list:
        pairs = [(list(context), list(continuation)) for _, context, continuation in requests]
        results = self._score(pairs, "theseus loglikelihood", disable_tqdm)
        for (strings, _, _), result in zip(requests, results, strict=True):
            if strings is not None:
                self.cache_hook.add_partial("loglikelihood", strings, result)
        return results

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of each whole text after the end-of-text token, in disjoint
        windows of at most ``max_seq_len`` predicted tokens, each with as much context as fits."""
        pairs, owner = [], []
        for index, request in enumerate(requests):
            (text,) = request.args
            windows = get_rolling_token_windows(
                token_list=self.tok_encode(text),
                prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length,
                context_len=1,
            )
            for window in map(make_disjoint_window, windows):
                pairs.append(window)
                owner.append(index)
        scored = self._score(pairs, "theseus loglikelihood_rolling", disable_tqdm)
        totals = [0.0] * len(requests)
        for index, (logp, _) in zip(owner, scored, strict=True):
            totals[index] += logp
        for request, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, total)
        return totals

    # ------------------------------------------------------------------ generation
    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuations (KV-cache decoding), cut before the first stop sequence.

        Stop sequences that are one token (special tokens such as ``<|end|>``) end a row
        early; longer ones are cut from the decoded text, which greedy decoding makes the
        same result."""
        groups: dict[str, list[int]] = {}
        settings = []
        for index, request in enumerate(requests):
            context, gen_kwargs = request.args
            kwargs = normalize_gen_kwargs(dict(gen_kwargs or {}), self.max_gen_toks)
            if kwargs.get("do_sample"):
                raise EvaluationError(
                    "the theseus model decodes greedily: this task asks for sampling "
                    f"(gen_kwargs {dict(gen_kwargs)}); set do_sample=false"
                )
            until = handle_stop_sequences(kwargs.get("until"), self.tok_decode([self.eot_token_id]))
            settings.append((context, until, int(kwargs["max_gen_toks"])))
            key = repr((sorted(until), int(kwargs["max_gen_toks"])))
            groups.setdefault(key, []).append(index)
        answers: list[str] = [""] * len(requests)
        with tqdm(total=len(requests), desc="theseus generate_until", disable=disable_tqdm) as bar:
            for indices in groups.values():
                _, until, max_new = settings[indices[0]]
                prompts = {i: self.tok_encode(settings[i][0]) for i in indices}
                for i, text in self._generate(prompts, until, max_new).items():
                    answers[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                bar.update(len(indices))
        return answers

    def _generate(self, prompts: dict[int, list[int]], until: list[str], max_new: int) -> dict:

        hook = registries().hook
        max_new = max(1, min(max_new, self.max_length - 1))
        room = self.max_length - max_new  # prompts keep their last tokens (lm-eval's rule)
        stops = {self.eot_token_id}
        for text in until:
            ids = self.tok_encode(text)
            if len(ids) == 1 and self.tok_decode(ids) == text:
                stops.add(ids[0])
        order = sorted(prompts, key=lambda i: (-len(prompts[i]), i))
        out = {}
        for start in range(0, len(order), self.batch_size):
            picked = order[start : start + self.batch_size]
            batch = [prompts[i][-room:] or [self.prefix_token_id] for i in picked]
            generated = hook.theseus_generate(
                model=self.target.model,
                prompts=batch,
                max_new_tokens=max_new,
                stop_tokens=sorted(stops),
                pad_id=self.target.pad_id,
            )
            if generated is None:
                raise EvaluationError(
                    f"no installed plugin generates with {type(self.target.model).__name__} "
                    "(pip install theseus-models)"
                )
            for i, ids in zip(picked, generated, strict=True):
                ids = list(ids)
                cut = next((k for k, t in enumerate(ids) if t in stops), len(ids))
                text = self.tok_decode(ids[:cut])
                for stop in until:
                    if stop:
                        text = text.split(stop)[0]
                out[i] = text
        return out
