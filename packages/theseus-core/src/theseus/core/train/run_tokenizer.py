"""Where a training run's tokenizer and vocabulary are, found without opening its data.

A run that reads datasets has the tokenizer they were tokenized with. A run whose recipe
reads none (``Recipe.reads_data`` false: GRPO, whose task makes its prompts) samples with
the tokenizer its starting weights were trained with: ``init.checkpoint``'s run's, or the
``tokenizer.json`` of ``init.hf``'s folder (``init_sources`` named it in ``data``). No
dataset of its ``data`` group is tokenized or opened for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from theseus.core.data import format as fmt
from theseus.core.data.api import run_dataset_path
from theseus.core.errors import JobError
from theseus.core.jobs import parse_reference
from theseus.core.plugins import registries as default_registries
from theseus.core.rundir import RunDir
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.recipe import PRETRAIN, DataLayout, Recipe
from theseus.core.train.saved_run import OpenRunError, recipe_of, saved_config, training_job

if TYPE_CHECKING:
    from theseus.core.registry import Registries


@dataclass(frozen=True)
class TokenizerOnly:
    """The data of a run that reads no dataset: what it needs of the ``TrainingData`` a
    data-reading run opens (its tokenizer's folder, the vocabulary, the layout)."""

    tokenizer_dir: Path
    vocab_size: int
    layout: DataLayout


def dataset_dir(root: str | Path, config: TrainJobConfig, run: RunDir | None = None) -> Path:
    """The run's (first) tokenized dataset: ``<root>/data/<dataset>/<variant>``, as the run
    recorded it, else as its config names it."""
    return run_dataset_path(root, config.data, run.path if run is not None else None)


@dataclass(frozen=True)
class RunTokenizer:
    """Where training run ``run`` (config ``config``, recipe ``recipe``) finds its tokenizer
    and its vocabulary."""

    root: str | Path
    run: RunDir
    config: TrainJobConfig
    recipe: Recipe = PRETRAIN
    registries: Registries | None = None

    def vocab_size(self) -> int:
        """The model's vocabulary: ``model.vocab_size``, else its tokenizer's: the tokenized
        dataset's, or (a run that reads no data) its starting weights' tokenizer's."""
        config = self.config
        if config.model.vocab_size:
            return int(config.model.vocab_size)
        if not self.recipe.reads_data:
            return tokenizer_only(self.root, config, self.recipe, self.registries).vocab_size
        metadata = dataset_dir(self.root, config, self.run) / fmt.METADATA
        if not metadata.is_file():
            raise OpenRunError(
                f"run {self.run.name!r} took its vocabulary from its tokenized data "
                f"(model.vocab_size=0) and {metadata} is gone: tokenize the data again to "
                "read the run"
            )
        return int(fmt.read_json(metadata)["tokenizer"]["vocab_size"])

    def folder(self) -> Path | None:
        """Where the tokenizer is: ``<run>/tokenizer/`` (an imported run's Hugging Face
        files), else, for a run that reads no data, its starting weights' tokenizer, else
        the folder of an ``hf`` tokenizer's ``tokenizer.json`` (a run that trains an
        imported one, chat template and all), else the tokenized dataset's ``tokenizer/``;
        ``None`` when none is left on disk."""
        own = self.run.tokenizer_dir
        if (own / "tokenizer.json").is_file():
            return own
        if not self.recipe.reads_data:
            return starting_tokenizer_dir(self.root, self.config, self.registries)
        found = dataset_dir(self.root, self.config, self.run) / "tokenizer"
        folder = hf_tokenizer_folder(self.config)
        if folder is not None:
            dataset_json = found / "tokenizer.json"
            mine = folder / "tokenizer.json"
            if mine.is_file() and (
                not dataset_json.is_file() or dataset_json.read_bytes() == mine.read_bytes()
            ):
                return folder
        return found if found.is_dir() else None


def hf_tokenizer_folder(config: TrainJobConfig) -> Path | None:
    """The folder of the ``tokenizer.json`` that ``data.tokenizer=hf`` names, if any."""
    data = config.data
    if data.tokenizer != "hf" or not data.tokenizer_options.get("path"):
        return None
    given = Path(str(data.tokenizer_options["path"])).expanduser()
    return given if given.is_dir() else given.parent


def starting_tokenizer_dir(
    root: str | Path, config: TrainJobConfig, registries: Registries | None = None
) -> Path | None:
    """The tokenizer the starting weights were trained with: ``init.checkpoint``'s run's,
    else the folder of the ``tokenizer.json`` that ``data`` names (``init.hf``'s, filled in
    by ``init_sources``); ``None`` when neither has one on disk."""
    if config.init.checkpoint:
        registries = registries or default_registries()
        prefix = f"init.checkpoint={config.init.checkpoint}: "
        name, _ = parse_reference(config.init.checkpoint, "init.checkpoint")
        source = RunDir(root, name)
        _, spec, job_class = training_job(source, registries, prefix, OpenRunError)
        typed, _ = saved_config(source, spec, registries, (), prefix, OpenRunError)
        return RunTokenizer(root, source, typed, recipe_of(job_class, typed), registries).folder()
    folder = hf_tokenizer_folder(config)
    return folder if folder is not None and (folder / "tokenizer.json").is_file() else None


def tokenizer_only(
    root: str | Path,
    config: TrainJobConfig,
    recipe: Recipe,
    registries: Registries | None = None,
) -> TokenizerOnly:
    """The starting weights' tokenizer as the data of a run that reads no dataset; one
    line when there is none."""
    registries = registries or default_registries()
    folder = starting_tokenizer_dir(root, config, registries)
    if folder is None:
        raise JobError(
            "this job reads no dataset and samples with the tokenizer of its starting weights, "
            "and they have none on disk: start from a run (init.checkpoint) whose tokenizer "
            "is still there, or from a Hugging Face folder with a tokenizer.json (init.hf)"
        )
    tokenizer = registries.hook.theseus_load_tokenizer(path=str(folder))
    if tokenizer is None:
        raise JobError(
            f"no installed plugin loads the tokenizer in {folder} (pip install theseus-data)"
        )
    vocab = int(config.model.vocab_size or tokenizer.vocab_size)
    return TokenizerOnly(folder, vocab, recipe.layout)
