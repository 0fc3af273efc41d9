"""The ``<model>/generate`` job: prompts in, text out (and ``generations.jsonl`` in the run).

The model comes from a training run (``generate.run=RUN[@STEP]``: its checkpoint and its
tokenizer, see :func:`theseus.core.train.opening.tokenizer_dir`), from a Hugging Face folder
(``generate.hf_dir``), or from Python callers (``context.extra["model"]`` or ``["state"]``).
With ``generate.chat=true`` each prompt is a user's message in the tokenizer's chat template
(the one the run's chat data was rendered with, and ``hf/export`` writes), and the answer
stops at the template's end of turn. Each result is printed once, on standard output.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from theseus.core.jobs import Job, parse_reference
from theseus.core.requirements import require
from theseus.core.rundir import RunDir
from theseus.core.train.opening import open_run
from theseus.models.errors import ModelError
from theseus.models.generate import generate
from theseus.models.hf import load_hf
from theseus.models.special_tokens import special_tokens

if TYPE_CHECKING:
    from theseus.core.registry import Registries

log = logging.getLogger(__name__)


@dataclass
class Text:
    """Text <-> ids, whichever tokenizer reads the folder."""

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    vocab_size: int


def load_text(path: Path, registries: Registries) -> Text:
    """A ``tokenizer.json`` (or a folder holding one) is read by ``tokenizers``, adding the
    special tokens its post-processor adds (a Llama BOS); any other tokenizer theseus saved
    (``byte``, ``tiktoken``) through ``theseus_load_tokenizer``."""
    file = path / "tokenizer.json" if path.is_dir() else path
    if file.is_file() and file.suffix == ".json":
        tokenizers = require("tokenizers", f"reading {file}", error=ModelError)
        tk = tokenizers.Tokenizer.from_file(str(file))
        return Text(lambda p: tk.encode(p).ids, tk.decode, tk.get_vocab_size())
    found = registries.hook.theseus_load_tokenizer(path=str(path))
    if found is None:
        raise ModelError(
            f"no installed plugin reads the tokenizer in {path} (pip install theseus-data)"
        )
    return Text(lambda p: list(found.encode(p)), found.decode, found.vocab_size)


def chat_prompts(
    path: Path | None, prompts: list[str], registries: Registries
) -> tuple[list[list[int]], list[int]]:
    """(each prompt as a user's message in the tokenizer's chat template, the assistant's
    turn opened; the ids that end an answer in that template)."""
    if path is None:
        raise ModelError("generate.chat=true needs a tokenizer: set generate.tokenizer=PATH")
    loaded = registries.hook.theseus_load_tokenizer(path=str(path))
    if not callable(getattr(loaded, "chat_prompt", None)):
        raise ModelError(
            f"generate.chat=true: no installed plugin gives the tokenizer in {path} a chat "
            "template (pip install theseus-data)"
        )
    ids = [loaded.chat_prompt([{"role": "user", "content": prompt}]) for prompt in prompts]
    return ids, list(loaded.chat_stops())


def as_list(ids: Any) -> list[int]:
    return [ids] if isinstance(ids, int) else list(ids or [])


def model_stops(model: Any) -> list[int]:
    """The end-of-sequence id(s) a model imported from Hugging Face carries."""
    return as_list(dict(getattr(model, "special_tokens", ())).get("eos_token_id"))


class GenerateJob(Job):
    """Typed config: ``model`` (the registered model's config) and ``generate``."""

    def load(self) -> tuple[Any, Path | None, list[int]]:
        """(model, its tokenizer's path or None, its stop tokens) from the configured source."""
        extra = self.context.extra
        g = self.config.generate
        own = Path(g.tokenizer) if g.tokenizer else None
        if "model" in extra:
            return extra["model"], own, model_stops(extra["model"])
        if "state" in extra:
            from flax import nnx

            config = self.config.model
            cls = self.context.registries.models.get(config.name).load()
            model = nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(params=0)))
            nnx.update(model, extra["state"])
            return model, own, []
        if bool(g.hf_dir) == bool(g.run):
            raise ModelError(
                "set exactly one of generate.run=RUN[@STEP] (a training run of this root) and "
                "generate.hf_dir=DIR (a Hugging Face folder)"
            )
        if g.run:
            return self.from_run(own)

        model = load_hf(g.hf_dir, dtype=self.config.model.dtype)
        found = Path(g.hf_dir) / "tokenizer.json"
        return model, own or (found if found.is_file() else None), model_stops(model)

    def from_run(self, own: Path | None) -> tuple[Any, Path | None, list[int]]:

        g, name = self.config.generate, self.config.model.name
        run_name, _ = parse_reference(g.run, "generate.run")
        key = str(RunDir(self.context.root, run_name).read_record().get("key", ""))
        family = key.split("/")[0]
        if family != name:
            raise ModelError(
                f"generate.run: run {run_name!r} is a {key} run: sample from it with "
                f"{family}/generate, not {name}/generate"
            )
        opened = open_run(
            self.context.root,
            g.run,
            registries=self.context.registries,
            what="generate.run",
            error=ModelError,
        )
        path = own or opened.tokenizer_dir
        specials = special_tokens(opened.run, opened.tokenizer_dir, self.context.registries)
        stops = as_list(specials.get("eos_token_id"))
        log.info("sampling from run %s at step %d", opened.run.name, opened.step)
        return opened.model, path, stops

    def __call__(self) -> list[str]:

        g = self.config.generate
        if g.tokenizer and not Path(g.tokenizer).exists():
            raise ModelError(f"tokenizer {g.tokenizer!r} does not exist")
        model, tokenizer_path, default_stops = self.load()
        text = load_text(tokenizer_path, self.context.registries) if tokenizer_path else None
        ends: list[int] = []  # a chat answer's end of turn
        if text is not None and hasattr(model, "check_vocab"):
            model.check_vocab(text.vocab_size)
        if g.chat:
            prompts, ends = chat_prompts(tokenizer_path, g.prompts, self.context.registries)
        elif text is not None:
            prompts = [text.encode(p) for p in g.prompts]
        else:
            try:
                prompts = [[int(t) for t in p.split()] for p in g.prompts]
            except ValueError as error:
                raise ModelError(f"no tokenizer: prompts must be token ids ({error})") from error
        # default: the end-of-sequence token(s), and in a chat the end of the turn
        stops = list(g.stop_tokens) or [*default_stops, *ends]
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
        if g.chat:  # the answer, without the token that ended its turn
            outputs = [o[:-1] if o and o[-1] in stops else o for o in outputs]
        texts = [text.decode(o) if text is not None else " ".join(map(str, o)) for o in outputs]
        with (self.run.path / "generations.jsonl").open("w") as f:
            for index, (prompt, ids, out) in enumerate(zip(g.prompts, outputs, texts, strict=True)):
                record = {"prompt": prompt, "ids": ids, "text": out}
                if g.chat:
                    record["prompt_ids"] = prompts[index]
                f.write(json.dumps(record) + "\n")
                log.debug("%s -> %s", prompt, out)  # the run's log; the terminal shows it once
                print(f"{prompt} -> {out}")
        return texts
