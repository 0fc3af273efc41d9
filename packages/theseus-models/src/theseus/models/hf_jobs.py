"""The ``hf/import`` and ``hf/export`` jobs: Hugging Face folders <-> theseus runs.

``theseus run hf/import hf.dir=DIR --name NAME`` makes run NAME a ``<family>/train/pretrain``
run at step 0, so everything that takes a training run takes it (``--branch NAME``,
``init.checkpoint=NAME``, ``generate.run=NAME``, ``hf/export``, time travel):

    <run>/config.yaml     a complete <family>/train/pretrain config: model.* from config.json;
                          data: the tokenizer below (data.tokenizer=hf), dataset hf.dataset,
                          data.suffix=NAME (its tokenization gets a folder of its own)
    <run>/job.json        key <family>/train/pretrain, imported_from DIR
    <run>/checkpoints/0   the weights (float32), the freshly initialised state of the config's
                          optimizer (AdamW by default), step 0; shapes and digests recorded
    <run>/tokenizer/      the folder's tokenizer files (tokenizer.json, tokenizer_config.json..)
    <run>/hf/             the folder's config.json and generation_config.json

Nothing is tokenized: a run that trains it further (``--branch NAME``) tokenizes its dataset
with the imported tokenizer then; generation and export need no data. The family is the one
whose ``hf.py`` names config.json's ``architectures`` (else its ``model_type``); anything
else is refused, before the run folder is made.

``theseus run hf/export hf.run=RUN[@STEP] hf.dir=OUT`` writes config.json, model.safetensors
(float32) and the run's tokenizer (tokenizer.json, a tokenizer_config.json that
``AutoTokenizer`` reads), which ``AutoModelForCausalLM.from_pretrained(OUT)`` loads.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from theseus.core.jobs import Job
from theseus.core.rundir import write_atomic
from theseus.models.errors import ModelError
from theseus.models.runs import RUN_SOURCE, RUN_TOKENIZER

log = logging.getLogger(__name__)

# Tokenizer files of a Hugging Face folder (copied on import, and on export when present).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)
SOURCE_FILES = ("config.json", "generation_config.json")


# ---------------------------------------------------------------------------- import


@dataclass
class Source:
    """A Hugging Face folder checked for import."""

    path: Path
    hf: dict  # its config.json
    family: str
    key: str  # <family>/train/pretrain
    tokenizer: Path  # its tokenizer.json


def inspect_source(config: Any, registries: Any) -> Source:
    """The folder ``hf.dir``, its family and tokenizer; one-line refusals for the rest."""
    from theseus.models.hf.checkpoint import family_for, read_config, resolve, unsupported

    path = resolve(config.dir)
    if not path.is_dir():
        raise ModelError(f"hf.dir: {config.dir} is not a folder")
    hf = read_config(path)
    family = family_for(hf)
    if family is None:
        raise unsupported(hf)
    family.load_hf().config_from_hf(hf)  # refuses the variants the family cannot run
    if not list(path.glob("*.safetensors")):
        raise ModelError(f"hf.dir: {path} holds no *.safetensors weights")
    key = f"{family.name}/train/pretrain"
    if key not in registries.jobs:
        raise ModelError(f"hf.dir: {path} is a {family.name} model but no job {key} exists")
    given = Path(config.tokenizer).expanduser() if config.tokenizer else path
    tokenizer = given / "tokenizer.json" if given.is_dir() else given
    if not tokenizer.is_file():
        raise ModelError(
            f"{tokenizer} does not exist: theseus reads Hugging Face fast tokenizers; write one "
            "with AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR), or give "
            "hf.tokenizer=PATH"
        )
    return Source(path, hf, family.name, key, tokenizer)


def copy_files(names: tuple[str, ...], source: Path, target: Path) -> list[str]:
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in names:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
            copied.append(name)
    return copied


def eos_token(source: Source) -> str:
    """The end-of-sequence token config.json names (``""`` when it names none)."""
    from tokenizers import Tokenizer

    ids = source.hf.get("eos_token_id")
    first = ids[0] if isinstance(ids, list) and ids else ids
    if not isinstance(first, int):
        return ""
    return Tokenizer.from_file(str(source.tokenizer)).id_to_token(first) or ""


class ImportJob(Job):
    """Typed config: ``hf`` (:class:`~theseus.models.hf_jobs_config.ImportConfig`)."""

    @classmethod
    def prerequisites(cls, config: Any, root: str) -> list:
        """No other job; the folder is checked here, before the run folder exists."""
        from theseus.core.plugins import registries

        inspect_source(config.hf, registries())
        return []

    def __call__(self) -> dict[str, Any]:
        from theseus.core.runner import config_for
        from theseus.core.train.configs import TrainJobConfig
        from theseus.models.hf.checkpoint import model_values

        regs = self.context.registries
        source = inspect_source(self.config.hf, regs)
        run = self.run
        for leftover in (run.checkpoint_dir, run.path / RUN_TOKENIZER, run.path / RUN_SOURCE):
            shutil.rmtree(leftover, ignore_errors=True)  # of an attempt that failed
        tokenizer_dir = run.path / RUN_TOKENIZER
        if self.config.hf.tokenizer and source.tokenizer.parent != source.path:
            copy_files(TOKENIZER_FILES, source.tokenizer.parent, tokenizer_dir)
        else:
            copy_files(TOKENIZER_FILES, source.path, tokenizer_dir)
        shutil.copyfile(source.tokenizer, tokenizer_dir / "tokenizer.json")
        copy_files(SOURCE_FILES, source.path, run.path / RUN_SOURCE)

        values = model_values(source.family, source.hf)
        tree = config_for(regs.jobs.get(source.key), regs)
        options: dict[str, Any] = {"path": str((tokenizer_dir / "tokenizer.json").resolve())}
        if eos := eos_token(source):
            options["eos_token"] = eos
        tree.apply(
            [(f"model.{key}", value) for key, value in values.items()]
            + [
                ("data.dataset", self.config.hf.dataset),
                ("data.tokenizer", "hf"),
                ("data.tokenizer_options", options),
                ("data.suffix", run.name),
                ("training.seq_len", min(tree.get("training.seq_len"), values["max_seq_len"])),
            ]
        )
        config = tree.to_object(TrainJobConfig)
        count = save_step_zero(config, regs, str(source.path), run)
        write_atomic(run.config_path, tree.to_yaml())
        run.update_record(key=source.key, imported_from=str(source.path), checkpoint_step=0)
        vocab = tokenizer_size(tokenizer_dir / "tokenizer.json")
        if vocab != config.model.vocab_size:
            log.warning(
                "the tokenizer has %d tokens, the model's vocab_size is %d: training it further "
                "on data from this tokenizer needs them equal",
                vocab,
                config.model.vocab_size,
            )
        architecture = (source.hf.get("architectures") or [source.hf.get("model_type")])[0]
        print(
            f"imported {architecture} from {source.path} as a {source.key} run at step 0 "
            f"({count / 1e6:.3g}M parameters, tokenizer of {vocab} tokens); train it further "
            f"with: theseus run {source.key} --name NEW --branch {run.name}"
        )
        return {
            "run": run.name,
            "key": source.key,
            "family": source.family,
            "parameters": count,
            "source": str(source.path),
        }


def tokenizer_size(path: Path) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)


def save_step_zero(config: Any, registries: Any, directory: str, run: Any) -> int:
    """Checkpoint 0 of ``run``: the folder's weights, a fresh optimizer state; the number of
    parameters. Placed as the config's mesh places them, written by core's ``Checkpoints``
    (so restores check its shapes and digests)."""
    import jax
    import jax.numpy as jnp
    from theseus.core.train.checkpoints import Checkpoints
    from theseus.core.train.hf_init import params_from_hf
    from theseus.core.train.setup import TrainSetup

    setup = TrainSetup.build(config, registries, config.model.vocab_size)
    params = params_from_hf(registries, directory, setup.abstract_state["params"])

    def state_of(params: Any) -> dict:
        zero = jnp.zeros((), jnp.int32)
        opt_state = setup.optimizer.init(params)
        return {"params": params, "opt_state": opt_state, "step": zero, "skipped": zero}

    shardings = {k: v for k, v in setup.state_shardings.items() if k != "frozen"}
    state = jax.jit(state_of, out_shardings=shardings)(params)
    checkpoints = Checkpoints(
        run.checkpoint_dir,
        config.checkpoint.keep_last,
        config.checkpoint.keep_every,
        asynchronous=False,
    )
    meta = {
        "step": 0,
        "run": run.name,
        "data_position": 0,
        "total_steps": setup.total_steps,
        "imported_from": directory,
    }
    try:
        checkpoints.save(0, state, setup.data_rng(), meta)
        checkpoints.wait()
    finally:
        checkpoints.close()
    return sum(int(leaf.size) for leaf in jax.tree.leaves(state["params"]))


# ---------------------------------------------------------------------------- export


def write_tokenizer(folder: Path, out: Path, specials: dict[str, Any], max_len: int) -> None:
    """The run's tokenizer as ``AutoTokenizer`` reads it: a Hugging Face folder's files as
    they are; a theseus tokenizer's ``tokenizer.json`` with a ``tokenizer_config.json``
    naming its special tokens (``PreTrainedTokenizerFast``: exactly tokenizer.json)."""
    from theseus.models.runs import read_json_object

    if not (folder / "tokenizer.json").is_file():
        kind = read_json_object(folder / "tokenizer_config.json").get("kind", "?")
        raise ModelError(
            f"the run's tokenizer ({kind}, in {folder}) has no tokenizer.json to export; "
            "export the weights alone with hf.tokenizer=false"
        )
    theirs = read_json_object(folder / "tokenizer_config.json")
    if (folder / "tokenizer_config.json").is_file() and "kind" not in theirs:
        copy_files(TOKENIZER_FILES, folder, out)  # a Hugging Face folder already
        return
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(folder / "tokenizer.json"))
    shutil.copyfile(folder / "tokenizer.json", out / "tokenizer.json")
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_len,
        "clean_up_tokenization_spaces": False,
    }
    for kind in ("bos", "eos", "pad"):
        token_id = specials.get(f"{kind}_token_id")
        if isinstance(token_id, int) and tk.id_to_token(token_id) is not None:
            config[f"{kind}_token"] = tk.id_to_token(token_id)
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


class ExportJob(Job):
    """Typed config: ``hf`` (:class:`~theseus.models.hf_jobs_config.ExportConfig`)."""

    def __call__(self) -> dict[str, Any]:
        from theseus.models.hf.checkpoint import family_of, save_hf
        from theseus.models.runs import open_run, special_tokens

        cfg, regs = self.config.hf, self.context.registries
        opened = open_run(self.context.root, cfg.run, regs, "hf.run")
        model = opened.model
        if family_of(model) is None:
            raise ModelError(
                f"hf.run: run {opened.run.name!r} is a {opened.config.model.name} model, which "
                "has no Hugging Face mapping"
            )
        out = Path(cfg.dir) if cfg.dir else self.run.path / "hf"
        specials = special_tokens(opened.run, opened.tokenizer_dir, regs)
        model.special_tokens = tuple(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(specials.items())
        )
        if out.exists() and any(out.iterdir()) and not (out / "config.json").is_file():
            raise ModelError(f"hf.dir: {out} is a folder with other files; choose an empty one")
        save_hf(model, out)
        source_generation = opened.run.path / RUN_SOURCE / "generation_config.json"
        if source_generation.is_file():
            shutil.copyfile(source_generation, out / "generation_config.json")
        if cfg.tokenizer:
            if opened.tokenizer_dir is None:
                raise ModelError(
                    f"run {opened.run.name!r} has no tokenizer left on disk (its tokenized "
                    "data is gone); export the weights alone with hf.tokenizer=false"
                )
            write_tokenizer(opened.tokenizer_dir, out, specials, opened.config.model.max_seq_len)
        print(f"exported run {opened.run.name} at step {opened.step} to {out}")
        return {"run": opened.run.name, "step": opened.step, "dir": str(out)}
