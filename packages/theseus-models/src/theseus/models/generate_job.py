"""The ``<model>/generate`` job: prompts in, text out (and ``generations.jsonl`` in the run)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from theseus.core.jobs import Job
from theseus.models.errors import ModelError

log = logging.getLogger(__name__)


class GenerateJob(Job):
    """Typed config: ``model`` (the registered model's config) and ``generate``."""

    def load_model(self) -> Any:
        """From ``context.extra["model"]`` or ``["state"]`` (Python callers), else ``hf_dir``."""
        extra = self.context.extra
        if "model" in extra:
            return extra["model"]
        if "state" in extra:
            from flax import nnx

            config = self.config.model
            cls = self.context.registries.models.get(config.name).load()
            model = nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(params=0)))
            nnx.update(model, extra["state"])
            return model
        g = self.config.generate
        if g.hf_dir:
            from theseus.models.hf import load_hf

            return load_hf(g.hf_dir, dtype=self.config.model.dtype)
        if g.checkpoint:
            raise ModelError(
                f"checkpoint={g.checkpoint!r}: loading training checkpoints is not wired yet; "
                "use generate.hf_dir"
            )
        raise ModelError("set generate.hf_dir (a transformers checkpoint directory)")

    def tokenizer(self) -> Any:
        g = self.config.generate
        path = Path(g.tokenizer) if g.tokenizer else Path(g.hf_dir or ".") / "tokenizer.json"
        if not path.is_file():
            if g.tokenizer:
                raise ModelError(f"tokenizer {g.tokenizer!r} does not exist")
            return None
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path))

    def __call__(self) -> list[str]:
        from theseus.models.generate import generate

        g = self.config.generate
        model = self.load_model()
        if not hasattr(model, "init_cache"):
            raise ModelError(
                f"{type(model).__name__} has no KV cache (init_cache/decode): it cannot generate"
            )
        tok = self.tokenizer()
        if tok is not None:
            if hasattr(model, "check_vocab"):
                model.check_vocab(tok.get_vocab_size())
            prompts = [tok.encode(p).ids for p in g.prompts]
        else:
            try:
                prompts = [[int(t) for t in p.split()] for p in g.prompts]
            except ValueError as error:
                raise ModelError(f"no tokenizer: prompts must be token ids ({error})") from error
        stops = list(g.stop_tokens)
        if not stops:  # default: the checkpoint's end-of-sequence token(s)
            eos = dict(getattr(model, "special_tokens", ())).get("eos_token_id")
            stops = [eos] if isinstance(eos, int) else list(eos or [])
        outputs = generate(
            model,
            prompts,
            max_new_tokens=g.max_new_tokens,
            temperature=g.temperature,
            top_k=g.top_k,
            top_p=g.top_p,
            seed=g.seed,
            stop_tokens=stops,
        )
        texts = [tok.decode(o) if tok is not None else " ".join(map(str, o)) for o in outputs]
        with (self.run.path / "generations.jsonl").open("w") as f:
            for prompt, ids, text in zip(g.prompts, outputs, texts, strict=True):
                f.write(json.dumps({"prompt": prompt, "ids": ids, "text": text}) + "\n")
                log.info("%s -> %s", prompt, text)
                print(f"{prompt} -> {text}")
        return texts
