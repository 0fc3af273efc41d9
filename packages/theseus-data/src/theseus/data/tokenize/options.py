"""The ``data`` config group of a ``data/tokenize/<dataset>`` job: the tokenization options
plus the dataset's own options, in one flat group (``data.files``, ``data.num_workers``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from theseus.core.components import option
from theseus.core.errors import PluginError


@dataclass
class TokenizeOptions:
    num_workers: int = option(0, "worker processes that tokenize in parallel (0: all cores)", ge=0)
    suffix: str = option(
        "", "a label added to the output folder's name (the folder is named by what makes it)"
    )
    validation_fraction: float = option(
        0.01, "fraction of documents in the validation split", ge=0, lt=1
    )
    max_tokens: int = option(0, "keep the first documents up to this many tokens (0: all)", ge=0)
    shard_tokens: int = option(100_000_000, "start a new shard after this many tokens", ge=1)
    unit_bytes: int = option(500_000, "text per work unit (the grain of parallelism/resume)", ge=1)
    skip_bad_records: bool = option(False, "skip (and count) malformed records instead of failing")


def job_schema(dataset_name: str, dataset_config: type) -> type:
    """A dataclass with the tokenize options followed by the dataset's fields."""
    own = {f.name for f in dataclasses.fields(TokenizeOptions)}
    fields = [(f.name, f.type, f) for f in dataclasses.fields(TokenizeOptions)]
    for f in dataclasses.fields(dataset_config):
        if f.name in own:
            raise PluginError(
                f"dataset {dataset_name!r}: its option {f.name!r} clashes with a tokenization "
                "option of the same name; rename it"
            )
        fields.append((f.name, f.type, f))
    class_name = "Tokenize" + "".join(p.title() for p in dataset_name.replace("-", "_").split("_"))
    return dataclasses.make_dataclass(class_name, fields)
