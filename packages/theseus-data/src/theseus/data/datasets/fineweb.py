"""``fineweb`` and ``fineweb-edu``: Hugging Face datasets streamed from the hub when online,
or local parquet/jsonl shards of the same schema (a ``text`` column) via ``data.files``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from theseus.core.components import option
from theseus.core.data.errors import DataError
from theseus.core.requirements import pip_install
from theseus.data.datasets.base import Dataset
from theseus.data.datasets.files import expand, read_texts


@dataclass
class FinewebConfig:
    files: str = option("", "local parquet/jsonl shards (globs); empty: stream from the hub")
    subset: str = option(
        "sample-10BT", "hub config name (snapshot or sample), e.g. CC-MAIN-2024-10"
    )
    max_documents: int = option(0, "use at most this many documents (0: all)", ge=0)
    repo: str = option("", "hub dataset id or a local clone of it (empty: the HuggingFaceFW one)")


class Fineweb(Dataset):
    kind = "text"
    repo: ClassVar[str] = "HuggingFaceFW/fineweb"

    def records(self) -> Iterator[str]:
        if self.config.files.strip():
            return self.limit(self._local())
        return self.limit(self._stream())

    def _local(self) -> Iterator[str]:
        skips = self.skips
        for path in expand(self.config.files):
            yield from read_texts(path, "text", skips)

    def _stream(self) -> Iterator[str]:
        repo = self.config.repo or self.repo
        rows = open_stream(repo, self.config.subset)
        try:
            for row in rows:
                text = row.get("text")
                if isinstance(text, str):
                    yield text
        except Exception as error:  # network failures surface while iterating
            raise DataError(_offline_message(repo, error)) from error


class FinewebEdu(Fineweb):
    repo = "HuggingFaceFW/fineweb-edu"


def open_stream(repo: str, subset: str) -> Any:
    try:
        import datasets
    except ImportError as error:
        raise DataError(
            f"streaming {repo} needs the datasets package: {pip_install('theseus-data[hub]')}; "
            "or give local shards with data.files=..."
        ) from error
    try:
        return datasets.load_dataset(repo, name=subset, split="train", streaming=True)
    except Exception as error:
        raise DataError(_offline_message(repo, error)) from error


def _offline_message(repo: str, error: BaseException) -> str:
    first = (str(error).splitlines() or [type(error).__name__])[0][:200]
    return (
        f"cannot stream {repo} from the Hugging Face hub ({type(error).__name__}: {first}); "
        "offline, give local parquet/jsonl shards with a 'text' column via data.files=..."
    )
