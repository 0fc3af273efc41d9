"""``text-files``: local .txt (one document per file), .jsonl or .parquet files by glob."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from theseus.core.components import option
from theseus.data.datasets.base import Dataset
from theseus.data.datasets.files import expand, read_texts


@dataclass
class TextFilesConfig:
    files: str = option(help="comma-separated globs of .txt, .jsonl or .parquet files")
    field: str = option("text", "the text field of jsonl lines / column of parquet files")
    max_documents: int = option(0, "use at most this many documents (0: all)", ge=0)


class TextFiles(Dataset):
    kind = "text"

    def records(self) -> Iterator[str]:
        skips = self.skips

        def texts() -> Iterator[str]:
            for path in expand(self.config.files):
                yield from read_texts(path, self.config.field, skips)

        return self.limit(texts())
