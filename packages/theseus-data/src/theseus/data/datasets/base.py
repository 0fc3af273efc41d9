"""What a dataset is: a config plus ``records()``, documents (text) or chat examples.

``kind = "text"`` datasets yield strings (documents; streaming pretraining corpora);
``kind = "chat"`` datasets yield lists of ``{"role": ..., "content": ...}`` messages
(indexable instruction/evaluation sets). Records come in a deterministic order.

The dataset contract (``theseus_register_datasets``): register
``Component(name, config=<dataclass of the dataset's options>, target="pkg.module:Class")``
with ``Class`` a subclass of :class:`Dataset`. theseus-data then registers the job
``data/tokenize/<name>``, whose ``data`` group is the tokenization options followed by the
dataset's own (so an option of yours is ``data.<option>`` there, and must not reuse a
tokenization option's name); a trainer passes options to it as
``data.dataset_options={option: value}`` (``data.files`` and ``data.max_documents`` are
forwarded when the dataset has such options). ``docs/plugins.md`` builds one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from theseus.data.datasets.files import Skips

Message = dict[str, str]


class Dataset:
    """Base class: ``Dataset(config)``, ``config`` the tokenize job's typed ``data`` group.

    Subclasses set ``kind`` and implement :meth:`records`; the tokenize job calls it more
    than once (a check that it is not empty, the tokenizer's training, the tokenization),
    so every call must start over and yield the same records in the same order (build any
    random generator inside the call, from a seed option). Long corpora are read lazily:
    records are consumed as they come, in work units, by parallel workers.
    """

    kind: ClassVar[str] = "text"

    def __init__(self, config: Any) -> None:
        self.config = config
        self.skips = Skips(getattr(config, "skip_bad_records", False))

    @property
    def skipped(self) -> int:
        """Records skipped so far because of ``data.skip_bad_records=true``."""
        return self.skips.count

    def records(self) -> Iterator[Any]:
        """Every record, from the start: strings (``kind = "text"``) or message lists
        (``kind = "chat"``). Wrap the iterator in :meth:`limit` to honour
        ``data.max_documents``; report a malformed record with ``self.skips.bad(message)``
        (an error, or skipped and counted with ``data.skip_bad_records=true``)."""
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
        """Stop after ``data.max_documents`` records when the config has that option (give
        your config a ``max_documents: int`` field, 0 meaning all, to support it)."""
        maximum = getattr(self.config, "max_documents", 0)
        for count, record in enumerate(records):
            if maximum and count >= maximum:
                return
            yield record
