"""What a dataset is: a config plus ``records()``, documents (text) or chat examples.

``kind = "text"`` datasets yield strings (documents; streaming pretraining corpora);
``kind = "chat"`` datasets yield lists of ``{"role": ..., "content": ...}`` messages
(indexable instruction/evaluation sets). Records come in a deterministic order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

Message = dict[str, str]


class Dataset:
    """Base class: ``Dataset(config)``, ``config`` the tokenize job's typed ``data`` group."""

    kind: ClassVar[str] = "text"

    def __init__(self, config: Any) -> None:
        from theseus.data.datasets.files import Skips

        self.config = config
        self.skips = Skips(getattr(config, "skip_bad_records", False))

    @property
    def skipped(self) -> int:
        """Records skipped so far because of ``data.skip_bad_records=true``."""
        return self.skips.count

    def records(self) -> Iterator[Any]:
        raise NotImplementedError

    def texts(self) -> Iterator[str]:
        """Plain text of every record (what a tokenizer is trained on)."""
        for record in self.records():
            if isinstance(record, str):
                yield record
            else:
                for message in record:
                    yield message["content"]

    def limit(self, records: Iterator[Any]) -> Iterator[Any]:
        """Stop after ``data.max_documents`` records when the config has that option."""
        maximum = getattr(self.config, "max_documents", 0)
        for count, record in enumerate(records):
            if maximum and count >= maximum:
                return
            yield record
