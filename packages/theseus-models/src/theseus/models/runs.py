"""A training run's model at a checkpointed step, and its tokenizer, without its data.

What ``<model>/generate generate.run=RUN[@STEP]`` and ``hf/export`` read. Time travel
(``theseus.core.inspect.timetravel.open_step``) restores the same state but also opens the
run's batches; a run made by ``hf/import`` has no tokenized data, so this opens only:

* the config: the run's ``config.yaml`` through its job's schema (as time travel does);
* the vocabulary: ``model.vocab_size``, or when it is 0 (taken from the data when the run
  trained) the ``metadata.json`` of the run's tokenized dataset;
* the weights: checkpoint STEP (default: the newest), restored into the train state that
  ``TrainSetup`` builds, digests verified, by core's ``Checkpoints``;
* the tokenizer folder (:func:`tokenizer_dir`): ``<run>/tokenizer/`` (an imported run's
  Hugging Face tokenizer files), else the folder of an ``hf`` tokenizer's ``tokenizer.json``
  (a run that trains an imported one), else the tokenized dataset's ``tokenizer/``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from theseus.core.rundir import RunDir
from theseus.models.errors import ModelError

log = logging.getLogger(__name__)

RUN_TOKENIZER = "tokenizer"  # <run>/tokenizer/: the tokenizer an imported run came with
RUN_SOURCE = "hf"  # <run>/hf/: an imported run's config.json (and generation_config.json)
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|im_end|>")
PAD_CANDIDATES = ("<|pad|>", "<pad>", "[PAD]")


@dataclass
class RunModel:
    """One run at one checkpointed step: its typed config and its model with those weights."""

    run: RunDir
    key: str  # the run's job, e.g. gpt/train/pretrain
    step: int
    config: Any  # the typed config (TrainJobConfig)
    model: Any  # the model with the checkpoint's parameters
    tokenizer_dir: Path | None  # see tokenizer_dir(); None when none is left on disk


def checkpointed_steps(run: RunDir) -> list[int]:
    directory = run.checkpoint_dir
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def pick_step(run: RunDir, at: int | None, what: str) -> int:
    """Step ``at`` (which must be checkpointed), or the newest checkpoint when ``None``."""
    steps = checkpointed_steps(run)
    if not steps:
        raise ModelError(f"{what}: run {run.name!r} has no checkpoints in {run.checkpoint_dir}")
    if at is None:
        return steps[-1]
    if at not in steps:
        raise ModelError(
            f"{what}: run {run.name!r} has no checkpoint at step {at} (it has {steps})"
        )
    return at


def dataset_dir(root: str | Path, config: Any, run: RunDir | None = None) -> Path:
    """The run's (first) tokenized dataset: ``<root>/data/<dataset>/<variant>``, as the run
    recorded it, else as its config names it."""
    from theseus.core.data.api import run_dataset_path

    return run_dataset_path(root, config.data, run.path if run is not None else None)


def tokenizer_dir(root: str | Path, run: RunDir, config: Any) -> Path | None:
    """Where the run's tokenizer is (see the module docstring); ``None`` when nowhere."""
    own = run.path / RUN_TOKENIZER
    if (own / "tokenizer.json").is_file():
        return own
    data = config.data
    if data.tokenizer == "hf" and data.tokenizer_options.get("path"):
        given = Path(str(data.tokenizer_options["path"])).expanduser()
        folder = given if given.is_dir() else given.parent
        dataset_json = dataset_dir(root, config, run) / "tokenizer" / "tokenizer.json"
        mine = folder / "tokenizer.json"
        if mine.is_file() and (
            not dataset_json.is_file() or dataset_json.read_bytes() == mine.read_bytes()
        ):
            return folder  # the Hugging Face files themselves, chat template and all
    found = dataset_dir(root, config, run) / "tokenizer"
    return found if found.is_dir() else None


def run_vocab_size(root: str | Path, run: RunDir, config: Any) -> int:
    """The model's vocabulary: ``model.vocab_size``, else the tokenized dataset's."""
    from theseus.core.data import format as fmt

    if config.model.vocab_size:
        return int(config.model.vocab_size)
    metadata = dataset_dir(root, config, run) / fmt.METADATA
    if not metadata.is_file():
        raise ModelError(
            f"run {run.name!r} took its vocabulary from its tokenized data (model.vocab_size=0) "
            f"and {metadata} is gone: tokenize the data again to read the run"
        )
    return int(fmt.read_json(metadata)["tokenizer"]["vocab_size"])


def open_run(root: str | Path, reference: str, registries: Any, what: str) -> RunModel:
    """Run ``RUN`` (newest checkpoint) or ``RUN@STEP`` of ``root``; ``what`` names the
    option in errors (``generate.run``)."""
    from theseus.core.inspect.timetravel import read_config
    from theseus.core.jobs import parse_reference
    from theseus.core.runner import config_for, job_spec
    from theseus.core.train.checkpoints import Checkpoints, abstract_of
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.setup import TrainSetup

    name, at = parse_reference(reference, what)
    run = RunDir(root, name)
    record = run.read_record()  # one line when there is no such run
    key = str(record.get("key", ""))
    spec = job_spec(key, registries)
    job_class = spec.load()
    config_type = getattr(job_class, "config_type", None)
    if not (isinstance(config_type, type) and issubclass(config_type, TrainJobConfig)):
        raise ModelError(f"{what}: run {name!r} is a {key} run, not a training run")
    step = pick_step(run, at, what)
    config = config_for(spec, registries, [], read_config(run)).to_object(config_type)
    vocab = run_vocab_size(root, run, config)
    setup = TrainSetup.build(config, registries, vocab)
    checkpoints = Checkpoints(run.checkpoint_dir, 1000, 0, False)
    try:
        state, _, _ = checkpoints.restore(
            step, setup.checkpointed_abstract, abstract_of(setup.data_rng())
        )
    finally:
        checkpoints.close()
    from theseus.core.train.base import frozen_base

    model = setup.model(setup.full_params({**state, "frozen": frozen_base(setup, str(root))}))
    log.info("opened run %s at step %d (%s)", name, step, key)
    found = tokenizer_dir(root, run, config)
    return RunModel(run, key, step, config, model, found)


# ---------------------------------------------------------------------------- special tokens


def _token_name(value: Any) -> str | None:
    """A special token as tokenizer_config.json gives it: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` when there is none (missing, not JSON, a list)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def tokenizer_special_tokens(folder: Path, registries: Any) -> dict[str, int]:
    """bos/eos/pad ids of a tokenizer folder: the tokens its ``tokenizer_config.json`` names
    (Hugging Face's, or theseus's ``eos_token``), else the usual names; bos defaults to eos
    (GPT-2's convention, and theseus's: documents are separated by eos only)."""
    file = folder / "tokenizer.json"
    if not file.is_file():  # byte, tiktoken, ...: theseus's own tokenizer says
        found = registries.hook.theseus_load_tokenizer(path=str(folder))
        if found is None:
            return {}
        return {
            "bos_token_id": found.eos_id,
            "eos_token_id": found.eos_id,
            "pad_token_id": found.pad_id,
        }
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(file))
    named = read_json_object(folder / "tokenizer_config.json")
    present = lambda tokens: next((t for t in tokens if tk.token_to_id(t) is not None), None)  # noqa: E731
    eos = _token_name(named.get("eos_token")) or present(EOS_CANDIDATES)
    pad = _token_name(named.get("pad_token")) or present(PAD_CANDIDATES)
    bos = _token_name(named.get("bos_token")) or eos
    ids = {}
    for kind, token in (("bos", bos), ("eos", eos), ("pad", pad)):
        if token is not None and tk.token_to_id(token) is not None:
            ids[f"{kind}_token_id"] = tk.token_to_id(token)
    return ids


def special_tokens(run: RunDir, folder: Path | None, registries: Any) -> dict[str, Any]:
    """bos/eos/pad ids of a run: an imported run's own config.json, else its tokenizer's."""
    source = run.path / RUN_SOURCE / "config.json"
    if source.is_file():
        from theseus.models.hf.checkpoint import special_tokens as of_config

        found = {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in of_config(read_json_object(source))
        }
        if found:
            return found
    return tokenizer_special_tokens(folder, registries) if folder is not None else {}
