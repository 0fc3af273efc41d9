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
``AutoTokenizer`` reads, with the run's ``chat_template``), which
``AutoModelForCausalLM.from_pretrained(OUT)`` loads. Its generation_config.json is the
imported folder's, else one that stops at end-of-document and at the built-in template's
``<|end|>``, as ``generate.chat=true`` does.

A LoRA run's checkpoints hold its adapters alone, so exporting one says how: ``hf.merge=true``
writes that same folder with the adapters folded into the weights; ``hf.peft=true`` writes
a PEFT adapter folder (:mod:`theseus.models.peft_export`) for ``PeftModel.from_pretrained``
on the base. Asking for neither is refused in one line: the base alone is not what the run
trained, and it is already where the run read it from.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from theseus.core.errors import TheseusError
from theseus.core.jobs import Job, parse_reference
from theseus.core.plugins import registries
from theseus.core.rundir import RunDir, missing_run, write_atomic
from theseus.core.runner import config_for
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.opening import open_run, params_from_hf, recipe_of
from theseus.core.train.step_zero import write_step_zero
from theseus.models.errors import ModelError
from theseus.models.hf.checkpoint import (
    family_config,
    family_for,
    family_of,
    model_values,
    save_hf,
    unsupported,
)
from theseus.models.hf.export_folder import SOURCE_FILES, TOKENIZER_FILES, check_target, staged
from theseus.models.hf.files import check_tensor_files, read_config, resolve
from theseus.models.lora_jobs import merged_model, saved_lora_rank
from theseus.models.peft_export import save_peft
from theseus.models.special_tokens import RUN_SOURCE, read_json_object, special_tokens

if TYPE_CHECKING:
    from theseus.core.registry import Registries

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- import


@dataclass
class Source:
    """A Hugging Face folder checked for import."""

    path: Path
    hf: dict  # its config.json
    family: str
    key: str  # <family>/train/pretrain
    tokenizer: Path  # its tokenizer.json


def inspect_source(config: Any, registries: Registries) -> Source:
    """The folder ``hf.dir``, its family and tokenizer; one-line refusals for the rest."""

    path = resolve(config.dir)
    if not path.is_dir():
        raise ModelError(f"hf.dir: {config.dir} is not a folder")
    hf = read_config(path)
    if list(path.glob("*.safetensors")):
        check_tensor_files(path)  # a truncated or foreign file: one line, before the run exists

    family = family_for(hf)
    if family is None:
        raise unsupported(hf)
    family_config(family, hf)  # refuses the variants the family cannot run
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
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_file(str(tokenizer))
    except Exception as error:  # tokenizers raises its own (Rust) exceptions
        raise ModelError(
            f"{tokenizer} is not a tokenizer file the tokenizers library reads "
            f"({' '.join(str(error).split())[:200]})"
        ) from error
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

        inspect_source(config.hf, registries())
        return []

    def __call__(self) -> dict[str, Any]:

        regs = self.context.registries
        source = inspect_source(self.config.hf, regs)
        run = self.run
        for leftover in (run.checkpoint_dir, run.tokenizer_dir, run.path / RUN_SOURCE):
            shutil.rmtree(leftover, ignore_errors=True)  # of an attempt that failed
        tokenizer_dir = run.tokenizer_dir
        if self.config.hf.tokenizer and source.tokenizer.parent != source.path:
            copy_files(TOKENIZER_FILES, source.tokenizer.parent, tokenizer_dir)
        else:
            copy_files(TOKENIZER_FILES, source.path, tokenizer_dir)
        shutil.copyfile(source.tokenizer, tokenizer_dir / "tokenizer.json")
        copy_files(SOURCE_FILES, source.path, run.path / RUN_SOURCE)

        values = model_values(source.family, source.hf)
        spec = regs.jobs.get(source.key)
        tree = config_for(spec, regs)
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
        directory = str(source.path)
        count = write_step_zero(
            config,
            regs,
            run,
            lambda like: params_from_hf(regs, directory, like),
            {"imported_from": directory},
            recipe_of(spec.load(), config),
        )
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


# ---------------------------------------------------------------------------- export


def write_tokenizer(folder: Path, out: Path, specials: dict[str, Any], max_len: int) -> None:
    """The run's tokenizer as ``AutoTokenizer`` reads it: a Hugging Face folder's files as
    they are; a theseus tokenizer's ``tokenizer.json`` with a ``tokenizer_config.json``
    naming its special tokens (``PreTrainedTokenizerFast``: exactly tokenizer.json)."""

    json_text = tokenizer_json(folder)
    theirs = read_json_object(folder / "tokenizer_config.json")
    if (folder / "tokenizer_config.json").is_file() and "kind" not in theirs:
        copy_files(TOKENIZER_FILES, folder, out)  # a Hugging Face folder already
        add_chat_template(folder, out)
        return
    from tokenizers import Tokenizer

    tk = Tokenizer.from_str(json_text)
    (out / "tokenizer.json").write_text(json_text)
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
    add_chat_template(folder, out)


def add_chat_template(folder: Path, out: Path) -> None:
    """The run's chat template as the export's ``chat_template`` (``tokenizer_config.json``):
    the template its chat data was rendered with (a Hugging Face one, or the built-in
    ``<|role|>content<|end|>`` in jinja), so that ``apply_chat_template`` prompts the model
    as it was trained. A folder that has a template keeps its own."""
    config = read_json_object(out / "tokenizer_config.json")
    if config.get("chat_template") or (out / "chat_template.jinja").is_file():
        return
    loaded = registries().hook.theseus_load_tokenizer(path=str(folder))
    source = getattr(loaded, "chat_template_source", None)
    if not callable(source):
        log.info("the run's tokenizer (in %s) names no chat template: the export has none", folder)
        return
    config["chat_template"] = source()
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def write_generation_config(folder: Path, out: Path, specials: dict[str, Any]) -> None:
    """``generation_config.json`` of an export whose run has none of its own: generation
    stops at end-of-document and at the end of a chat turn in the run's template (the
    built-in ``<|end|>``), as ``generate.chat=true`` stops, so that a chat through
    ``transformers`` ends where the model was trained to end its answer."""
    loaded = registries().hook.theseus_load_tokenizer(path=str(folder))
    turn_ends = loaded.chat_stops() if callable(getattr(loaded, "chat_stops", None)) else []
    if not turn_ends:
        return  # config.json's eos_token_id says it all
    eos = specials.get("eos_token_id")
    stops = list(dict.fromkeys([*([eos] if isinstance(eos, int) else []), *turn_ends]))
    config: dict[str, Any] = {"eos_token_id": stops}
    for kind in ("bos", "pad"):
        if isinstance(specials.get(f"{kind}_token_id"), int):
            config[f"{kind}_token_id"] = specials[f"{kind}_token_id"]
    (out / "generation_config.json").write_text(json.dumps(config, indent=2) + "\n")


def tokenizer_json(folder: Path) -> str:
    """The ``tokenizer.json`` text of a run's tokenizer: its file, else what its kind writes
    as one (``hf_json()``: the byte tokenizer); one line when it has neither."""
    if (folder / "tokenizer.json").is_file():
        return (folder / "tokenizer.json").read_text()
    loaded = registries().hook.theseus_load_tokenizer(path=str(folder))
    as_json = getattr(loaded, "hf_json", None)
    if not callable(as_json):
        kind = read_json_object(folder / "tokenizer_config.json").get("kind", "?")
        raise ModelError(
            f"the run's tokenizer ({kind}, in {folder}) has no tokenizer.json to export; "
            "export the weights alone with hf.tokenizer=false"
        )
    return str(as_json())


def saved_model_class(root: str, reference: str) -> type | None:
    """The model class of run ``RUN[@STEP]``'s saved ``model.name``; ``None`` when it cannot
    be told here (``open_run`` names the problem)."""
    name, _ = parse_reference(reference, "hf.run")
    try:
        model = RunDir(root, name).read_config().get("model") or {}
        return registries().models.get(model["name"]).load()
    except (TheseusError, KeyError, TypeError, AttributeError):
        return None


def check_export(config: Any, root: str) -> None:
    """A LoRA run exports as merged weights or as PEFT adapters, chosen explicitly (its
    checkpoints hold adapters alone: writing its base as "the run" would drop all it
    trained); a plain run has no adapters to export. One line, before any work."""
    if config.merge and config.peft:
        raise ModelError("hf.merge=true and hf.peft=true: choose one (merged weights, or adapters)")
    if config.dir:  # another folder than this job's own: never replaced without hf.overwrite
        check_target(Path(config.dir), config.overwrite)

    name, _ = parse_reference(config.run, "hf.run")
    if not RunDir(root, name).exists():  # said before a run folder of this export is made
        raise ModelError(f"hf.run: {missing_run(RunDir(root, name))}")
    rank = saved_lora_rank(root, config.run, "hf.run")
    if rank is None:
        return  # no readable run here: open_run says why
    model_class = saved_model_class(root, config.run)
    if model_class is not None:
        family_of(model_class)  # a subclass inheriting its parent's mapping unasked: refused
    if rank and not (config.merge or config.peft):
        raise ModelError(
            f"hf.run: run {config.run!r} trained LoRA adapters (lora.rank={rank}) on a frozen "
            "base; export them with hf.merge=true (one model, adapters folded in) or "
            "hf.peft=true (a PEFT adapter folder for the base)"
        )
    if not rank and config.peft:
        raise ModelError(
            f"hf.peft=true: run {config.run!r} trained no adapters (lora.rank=0); export it "
            "without hf.peft"
        )


def peft_base(opened: Any) -> str:
    """The Hugging Face base a PEFT export names: the run's ``init.hf`` when the run's frozen
    base is exactly that folder's weights; ``""`` when the base must be written out."""
    config = opened.config
    if config.init.hf and config.lora.base_dtype in ("", "float32"):
        path = Path(config.init.hf).expanduser()
        return str(path.resolve()) if path.exists() else str(config.init.hf)  # or a hub id
    return ""


class ExportJob(Job):
    """Typed config: ``hf`` (:class:`~theseus.models.hf_jobs_config.ExportConfig`).

    A LoRA run exports with ``hf.merge=true`` (a plain folder of the merged weights) or
    ``hf.peft=true``: ``adapter_config.json`` and ``adapter_model.safetensors`` (see
    :mod:`theseus.models.peft_export`), naming the run's ``init.hf`` folder as the base; a
    base that is no such folder (``init.checkpoint``, the seeded initialisation, a
    ``lora.base_dtype`` that rounded it) is written beside them in ``base/``, a Hugging
    Face folder the adapter config names.
    """

    @classmethod
    def prerequisites(cls, config: Any, root: str) -> list:
        check_export(config.hf, root)
        return []

    def __call__(self) -> dict[str, Any]:

        cfg, regs = self.config.hf, self.context.registries
        opened = open_run(
            self.context.root, cfg.run, registries=regs, what="hf.run", error=ModelError
        )
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
        if cfg.dir:
            check_target(out, cfg.overwrite)  # again: the folder may have changed meanwhile
        with staged(out) as stage:
            result = self.export(model, stage, out, opened, specials)
        what = result.pop("what")
        print(f"exported {what} of run {opened.run.name} at step {opened.step} to {out}")
        return result

    def export(
        self, model: Any, out: Path, final: Path, opened: Any, specials: dict
    ) -> dict[str, Any]:
        """Write the export into ``out`` (a staging folder that becomes ``final``)."""
        cfg = self.config.hf
        result: dict[str, Any] = {"run": opened.run.name, "step": opened.step, "dir": str(final)}
        if cfg.peft:
            base = peft_base(opened)
            if not base:  # named where it will be once the staging folder is moved in
                base = str((final / "base").resolve())
                self.write_folder(model, out / "base", opened, specials)
            save_peft(model, opened.config.lora, out, base)
            if cfg.tokenizer:
                self.write_tokenizer(out, opened, specials)
            result["base"] = base
            return {**result, "what": "the adapters"}
        if cfg.merge and opened.config.lora.rank > 0:
            model = merged_model(model)
        self.write_folder(model, out, opened, specials)
        return {**result, "what": "the weights"}

    def write_folder(self, model: Any, out: Path, opened: Any, specials: dict) -> None:
        """config.json, model.safetensors, generation_config.json and the tokenizer."""

        save_hf(model, out)
        source_generation = opened.run.path / RUN_SOURCE / "generation_config.json"
        if source_generation.is_file():
            shutil.copyfile(source_generation, out / "generation_config.json")
        if self.config.hf.tokenizer:
            self.write_tokenizer(out, opened, specials)
            if not source_generation.is_file():  # write_tokenizer found the folder
                write_generation_config(opened.tokenizer_dir, out, specials)

    def write_tokenizer(self, out: Path, opened: Any, specials: dict) -> None:
        if opened.tokenizer_dir is None:
            raise ModelError(
                f"run {opened.run.name!r} has no tokenizer left on disk (its tokenized "
                "data is gone); export the weights alone with hf.tokenizer=false"
            )
        write_tokenizer(opened.tokenizer_dir, out, specials, opened.config.model.max_seq_len)
