"""``data/tokenize/<dataset>``: tokenize a registered dataset into ``<root>/data/<name>/``.

Steps: record the settings (or reuse/refuse an existing output), build or load the
tokenizer, tokenize work units in ``data.num_workers`` spawned processes (skipping units a
previous, interrupted run finished), assemble the shards, write ``metadata.json`` last.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from theseus.core.data import format as fmt
from theseus.core.data.errors import DataError, SettingsConflictError
from theseus.core.jobs import Job
from theseus.core.locks import exclusive
from theseus.data.tokenize.assemble import assemble, file_checksums
from theseus.data.tokenize.options import RUNTIME_ONLY
from theseus.data.tokenize.progress import TokenizeMeter
from theseus.data.tokenize.units import (
    Prefix,
    encode_unit,
    finished_units,
    init_worker,
    plan_units,
    remove_partial_units,
    unit_path,
    unit_summary,
)

log = logging.getLogger(__name__)
WORK = ".work"


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class TokenizeJob(Job):
    """Tokenize the dataset named by the job key (``data/tokenize/<dataset>``)."""

    timings: dict[str, float] | None = None  # of the last call (for benchmarks)

    def __call__(self) -> dict[str, Any]:
        name = self.dataset_name()
        out = fmt.dataset_dir(self.context.root, name, self.config.data.suffix)
        hint = "wait for it to finish (the next run reuses its output)"
        with exclusive(out, f"dataset directory {out}", hint):
            return self.tokenize(name, out)

    def tokenize(self, name: str, out: Path) -> dict[str, Any]:
        """Tokenize into ``out`` (its lock held), or reuse it when its settings match."""
        settings = self.settings(name)
        if self.reuse(out, settings):
            return fmt.read_json(out / fmt.METADATA)
        dataset = self.dataset(name)
        if next(iter(dataset.records()), None) is None:  # bad globs, empty corpora: fail early
            raise DataError(f"dataset {name!r} produced no documents: the corpus is empty")
        out.mkdir(parents=True, exist_ok=True)
        fmt.write_json_atomic(out / fmt.SETTINGS, settings)

        tokenizer = self.tokenizer(out, dataset)
        dataset.skips.count = 0  # count the tokenization pass only (training read it too)
        work = out / WORK
        work.mkdir(exist_ok=True)
        started = time.perf_counter()
        units, meter = self.tokenize_units(name, dataset, out / fmt.TOKENIZER_DIR, work)
        tokenized = time.perf_counter()
        metadata = self.write_output(out, work, units, name, settings, dataset, tokenizer, meter)
        shutil.rmtree(work, ignore_errors=True)
        self.timings = {
            "tokenize_s": tokenized - started,
            "assemble_s": time.perf_counter() - tokenized,
            "text_bytes": meter.bytes,
        }
        log.info("tokenized %s into %s: %s", name, out, meter.line())
        if dataset.skipped:
            log.warning("skipped %d bad records (data.skip_bad_records=true)", dataset.skipped)
        return metadata

    def dataset_name(self) -> str:
        return self.context.run.read_record()["key"].split("/", 2)[2]

    def write_output(
        self,
        out: Path,
        work: Path,
        units: int,
        name: str,
        settings: dict[str, Any],
        dataset: Any,
        tokenizer: Any,
        meter: TokenizeMeter,
    ) -> dict[str, Any]:
        """Assemble the shards from the units, then write ``metadata.json`` (last)."""
        described = tokenizer.describe()
        dtype = fmt.token_dtype(described["vocab_size"])
        chat = dataset.kind in ("chat", "preference")
        data = self.config.data
        written = assemble(
            work,
            out,
            units,
            dtype=dtype,
            fraction=data.validation_fraction,
            shard_tokens=data.shard_tokens,
            with_mask=chat,
            max_tokens=data.max_tokens,
        )
        metadata = {
            "format_version": fmt.FORMAT_VERSION,
            "dataset": name,
            "kind": dataset.kind,
            "settings": settings,
            "tokenizer": {"name": self.config.tokenizer.name, **described},
            "token_dtype": dtype,
            "has_loss_mask": chat,
            "documents": written["documents"],
            "text_bytes": written["text_bytes"],
            "tokens": written["tokens"],
            "skipped_records": dataset.skipped,
            "splits": written["splits"],
            "files": file_checksums(out),
        }
        fmt.write_json_atomic(out / fmt.METADATA, metadata)
        return metadata

    # ------------------------------------------------------------------ settings
    def settings(self, name: str) -> dict[str, Any]:
        data = dataclasses.asdict(self.config.data)
        tokenizer = dataclasses.asdict(self.config.tokenizer)  # its kind's `name` included
        kept = {k: v for k, v in data.items() if k not in RUNTIME_ONLY}
        return {
            "format_version": fmt.FORMAT_VERSION,
            "dataset": name,
            "data": kept,
            "tokenizer": tokenizer,
        }

    def reuse(self, out: Path, settings: dict[str, Any]) -> bool:
        """True when ``out`` is complete with these settings; an error when it is complete
        with others. An incomplete output with other settings is started over."""
        if (out / fmt.METADATA).exists():
            previous = fmt.read_json(out / fmt.METADATA).get("settings", {})
            if previous != settings:
                raise SettingsConflictError(
                    f"{out} was made with {_describe(previous)}; this job asks for "
                    f"{_describe(settings)} (differs in {_differences(previous, settings)}): "
                    f"set data.suffix=... to keep both, or delete {out}"
                )
            log.info("%s is complete with the same settings: reusing it", out)
            return True
        if (out / fmt.SETTINGS).exists() and fmt.read_json(out / fmt.SETTINGS) != settings:
            previous = fmt.read_json(out / fmt.SETTINGS)
            log.warning(
                "%s holds an incomplete tokenization with other settings (%s): starting over",
                out,
                _differences(previous, settings),
            )
            shutil.rmtree(out)
        return False

    # ------------------------------------------------------------------ parts
    def dataset(self, name: str) -> Any:
        component = self.context.registries.datasets.get(name)
        return component.load()(self.config.data)

    def tokenizer(self, out: Path, dataset: Any) -> Any:
        from theseus.data.tokenizers import create_tokenizer, load_tokenizer

        directory = out / fmt.TOKENIZER_DIR
        if directory.exists():
            return load_tokenizer(directory)
        tokenizer = create_tokenizer(self.config.tokenizer, dataset.texts)
        tmp = out / (fmt.TOKENIZER_DIR + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tokenizer.save(tmp)
        os.replace(tmp, directory)
        return tokenizer

    def tokenize_units(
        self, name: str, dataset: Any, tokenizer_dir: Path, work: Path
    ) -> tuple[int, TokenizeMeter]:
        workers = self.config.data.num_workers or cpu_count()
        unit_bytes = self.config.data.unit_bytes
        plan_file = work / "plan.json"
        if plan_file.exists() and fmt.read_json(plan_file) != {"unit_bytes": unit_bytes}:
            shutil.rmtree(work)  # units of another size cannot be mixed
            work.mkdir()
        fmt.write_json_atomic(plan_file, {"unit_bytes": unit_bytes})
        if partial := remove_partial_units(work):
            log.info("removed %d unit files a stopped run left half written", partial)
        done = len(finished_units(work))
        if done:
            log.info("resuming: %d of the units are already tokenized", done)
        context = multiprocessing.get_context("spawn")
        pending: dict[Future, int] = {}
        sizes: dict[int, int] = {}
        max_tokens = self.config.data.max_tokens
        prefix = Prefix()
        with (
            TokenizeMeter(f"tokenizing {name} ({workers} workers)") as meter,
            ProcessPoolExecutor(workers, context, init_worker, (str(tokenizer_dir),)) as pool,
        ):
            for unit in plan_units(dataset.records(), unit_bytes):
                if max_tokens and prefix.tokens >= max_tokens:
                    break  # enough tokens in finished leading units: stop reading
                path = unit_path(work, unit.index)
                digest = unit.digest()
                if path.exists():
                    done_digest, tokens = unit_summary(path)
                    if done_digest == digest:
                        meter.add(len(unit.records), unit.num_bytes, tokens)
                        prefix.add(unit.index, tokens)
                        continue
                    log.warning(
                        "unit %d: its input changed since it was tokenized; redoing", unit.index
                    )
                while len(pending) >= 2 * workers:
                    self._collect(pending, sizes, meter, prefix)
                future = pool.submit(
                    encode_unit, unit.index, dataset.kind, unit.records, str(work), digest
                )
                pending[future] = unit.index
                sizes[unit.index] = unit.num_bytes
            while pending:
                self._collect(pending, sizes, meter, prefix)
        count = prefix.units_for(max_tokens)
        done_before = len(prefix.tokens_of) - meter.units_done
        log.info(
            "%d units tokenized now by %d worker processes, %d by an earlier run; keeping %d",
            meter.units_done,
            len(meter.workers),
            done_before,
            count,
        )
        return count, meter

    @staticmethod
    def _collect(pending: dict, sizes: dict, meter: TokenizeMeter, prefix: Prefix) -> None:
        done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        for future in done:
            pending.pop(future)
            index, documents, tokens, pid = future.result()
            meter.add(documents, sizes.pop(index), tokens)
            meter.workers.add(pid)
            meter.units_done += 1
            prefix.add(index, tokens)


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _differences(old: dict[str, Any], new: dict[str, Any]) -> str:
    a, b = _flat(old), _flat(new)
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys) or "nothing"


def _describe(settings: dict[str, Any]) -> str:
    tokenizer = settings.get("tokenizer", {})
    tok = ",".join(f"{k}={v}" for k, v in sorted(tokenizer.items()) if k != "name")
    data = settings.get("data", {})
    rest = " ".join(f"{k}={v}" for k, v in sorted(data.items()))
    return f"tokenizer {tokenizer.get('name')}({tok}) {rest}".strip()
