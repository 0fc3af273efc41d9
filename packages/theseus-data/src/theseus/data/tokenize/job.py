"""``data/tokenize/<dataset>``: tokenize a registered dataset into
``<root>/data/<name>/<variant>/`` (the variant named by what makes it).

Steps: record the settings (or reuse/refuse an existing output), build or load the
tokenizer, tokenize work units in ``data.num_workers`` spawned processes (skipping units a
previous, interrupted run finished), publish them in order into the shards as they finish
(readers may train on them meanwhile), write ``metadata.json`` last.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from theseus.core import stop
from theseus.core.data import format as fmt
from theseus.core.data.errors import DataError, SettingsConflictError
from theseus.core.data.identity import describe_settings, settings_differences
from theseus.core.errors import PreemptedError
from theseus.core.jobs import Job
from theseus.core.locks import exclusive
from theseus.data.tokenize.identity import identity_settings, output_dir, with_digest
from theseus.data.tokenize.migrate import migrate_root
from theseus.data.tokenize.progress import TokenizeMeter
from theseus.data.tokenize.publish import Publisher
from theseus.data.tokenize.units import (
    Prefix,
    encode_unit,
    finished_units,
    plan_units,
    read_unit,
    remove_partial_units,
    unit_path,
    unit_summary,
)
from theseus.data.tokenize.workers import finish_running, finished_some, worker_pool

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
        migrate_root(self.context.root)
        settings = with_digest(self.settings(name))
        out = output_dir(self.context.root, name, settings, self.config.data.suffix)
        hint = "wait for it to finish (the next run reuses its output; a trainer may read it now)"
        what = f"the tokenization of {name} (the units it finished are published first)"
        with exclusive(out, f"dataset directory {out}", hint), stop.graceful(what):
            return self.tokenize(name, out, settings)

    def tokenize(self, name: str, out: Path, settings: dict[str, Any]) -> dict[str, Any]:
        """Tokenize into ``out`` (its lock held), or reuse it when its settings match."""
        if self.reuse(out, settings):
            return fmt.read_json(out / fmt.METADATA)
        dataset = self.dataset(name)
        if next(iter(dataset.records()), None) is None:  # bad globs, empty corpora: fail early
            raise DataError(f"dataset {name!r} produced no documents: the corpus is empty")
        out.mkdir(parents=True, exist_ok=True)
        fmt.write_json_atomic(out / fmt.SETTINGS, settings)
        log.info("tokenizing %s into %s", name, out)

        tokenizer = self.tokenizer(out, dataset)
        if stop.requested.is_set():  # while the tokenizer trained (it is kept for the rerun)
            raise PreemptedError(
                f"run {self.context.run.name} stopped by a signal ({stop.last_signal()}) "
                "before any unit was tokenized; rerun the same command to resume"
            )
        dataset.skips.count = 0  # count the tokenization pass only (training read it too)
        work = out / WORK
        work.mkdir(exist_ok=True)
        started = time.perf_counter()
        publisher = self.publisher(out, name, settings, dataset, tokenizer)
        meter = self.tokenize_units(name, dataset, out / fmt.TOKENIZER_DIR, work, publisher)
        tokenized = time.perf_counter()
        metadata = publisher.finish({"skipped_records": dataset.skipped})
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

    def publisher(
        self, out: Path, name: str, settings: dict[str, Any], dataset: Any, tokenizer: Any
    ) -> Publisher:
        """Publishes the units into ``out`` (resuming what an interrupted run published)."""
        described = tokenizer.describe()
        chat = dataset.kind in ("chat", "preference")
        header = {
            "format_version": fmt.FORMAT_VERSION,
            "dataset": name,
            "kind": dataset.kind,
            "settings": settings,
            "tokenizer": {"name": self.config.tokenizer.name, **described},
            "token_dtype": fmt.token_dtype(described["vocab_size"]),
            "has_loss_mask": chat,
        }
        data = self.config.data
        return Publisher(
            out,
            header,
            fraction=data.validation_fraction,
            shard_tokens=data.shard_tokens,
            max_tokens=data.max_tokens,
            group=2 if dataset.kind == "preference" else 1,
            with_mask=chat,
        )

    def dataset_name(self) -> str:
        return self.context.run.read_record()["key"].split("/", 2)[2]

    # ------------------------------------------------------------------ settings
    def settings(self, name: str) -> dict[str, Any]:
        return identity_settings(name, self.config.data, self.config.tokenizer)

    def reuse(self, out: Path, settings: dict[str, Any]) -> bool:
        """True when ``out`` is complete with these settings; an error when it is complete
        with others. An incomplete output with other settings is started over."""
        if (out / fmt.METADATA).exists():
            previous = fmt.read_json(out / fmt.METADATA).get("settings", {})
            if previous != settings:
                raise SettingsConflictError(
                    f"{out} was made with {describe_settings(previous)}; this job asks for "
                    f"{describe_settings(settings)} (differs in "
                    f"{settings_differences(previous, settings)}): delete {out} to tokenize "
                    "it again"
                )
            log.info("%s is complete with the same settings: reusing it", out)
            return True
        if (out / fmt.SETTINGS).exists() and fmt.read_json(out / fmt.SETTINGS) != settings:
            previous = fmt.read_json(out / fmt.SETTINGS)
            log.warning(
                "%s holds an incomplete tokenization with other settings (%s): starting over",
                out,
                settings_differences(previous, settings),
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
        self, name: str, dataset: Any, tokenizer_dir: Path, work: Path, publisher: Publisher
    ) -> TokenizeMeter:
        """Tokenize the units not done yet (in parallel) and publish every unit in order."""
        workers = self.config.data.num_workers or cpu_count()
        unit_bytes = self.config.data.unit_bytes
        plan_file = work / "plan.json"
        if plan_file.exists() and fmt.read_json(plan_file) != {"unit_bytes": unit_bytes}:
            shutil.rmtree(work)  # units of another size cannot be mixed
            work.mkdir()
            if publisher.units:
                log.warning("the units were cut at another size before: publishing again")
                publisher.reset()
        fmt.write_json_atomic(plan_file, {"unit_bytes": unit_bytes})
        if partial := remove_partial_units(work):
            log.info("removed %d unit files a stopped run left half written", partial)
        if done := len(finished_units(work)):
            log.info("resuming: %d of the units are already tokenized", done)
        pending: dict[Future, int] = {}
        sizes: dict[int, int] = {}
        ready: set[int] = set()  # finished unit files, published or not
        max_tokens = self.config.data.max_tokens
        prefix = Prefix()
        resumed = planned = 0
        cut_short = False  # a stop came before every unit was planned
        with (
            TokenizeMeter(f"tokenizing {name} ({workers} workers)") as meter,
            worker_pool(workers, str(tokenizer_dir)) as pool,
        ):
            for unit in plan_units(dataset.records(), unit_bytes):
                if (max_tokens and prefix.tokens >= max_tokens) or publisher.done:
                    break  # enough tokens in finished leading units: stop reading
                if stop.requested.is_set():
                    cut_short = True
                    break
                planned = unit.index + 1
                publisher.plan(planned, False)
                path = unit_path(work, unit.index)
                digest = unit.digest()
                if path.exists():
                    done_digest, tokens = unit_summary(path)
                    if done_digest == digest:
                        meter.add(len(unit.records), unit.num_bytes, tokens)
                        prefix.add(unit.index, tokens)
                        ready.add(unit.index)
                        resumed += 1
                        self._publish(publisher, ready, work)
                        continue
                    log.warning(
                        "unit %d: its input changed since it was tokenized; redoing", unit.index
                    )
                    if unit.index < publisher.next_unit:
                        log.warning("unit %d was published already: publishing again", unit.index)
                        publisher.reset()
                while len(pending) >= 2 * workers and not stop.requested.is_set():
                    self._collect(pending, finished_some(pending), sizes, meter, prefix, ready)
                    self._publish(publisher, ready, work)
                if stop.requested.is_set():
                    cut_short = True
                    break
                future = pool.submit(
                    encode_unit, unit.index, dataset.kind, unit.records, str(work), digest
                )
                pending[future] = unit.index
                sizes[unit.index] = unit.num_bytes
            if not cut_short:
                publisher.plan(planned, True)
            while pending and not stop.requested.is_set():
                self._collect(pending, finished_some(pending), sizes, meter, prefix, ready)
                self._publish(publisher, ready, work)
            if stop.requested.is_set():  # what is finished is published; the workers end
                self._collect(pending, finish_running(pending), sizes, meter, prefix, ready)
                self._publish(publisher, ready, work)
                if cut_short or pending:  # else every unit is done: the job finishes
                    raise self.stopped(publisher)
            self._publish(publisher, ready, work)
        log.info(
            "%d units tokenized now by %d worker processes, %d by an earlier run; %d published",
            meter.units_done,
            len(meter.workers),
            resumed,
            publisher.units,
        )
        return meter

    def stopped(self, publisher: Publisher) -> PreemptedError:
        """The one line a signal ends the job with (the units published stay usable)."""
        return PreemptedError(
            f"run {self.context.run.name} stopped by a signal ({stop.last_signal()}): "
            f"{publisher.units} units published and usable, the others not tokenized yet; "
            "rerun the same command to resume"
        )

    @staticmethod
    def _publish(publisher: Publisher, ready: set[int], work: Path) -> None:
        """Publish the finished units that come next in order."""
        while publisher.next_unit in ready and not publisher.done:
            tokens, lengths, sizes, mask = read_unit(unit_path(work, publisher.next_unit))
            publisher.add_unit(tokens, lengths, sizes, mask)

    @staticmethod
    def _collect(
        pending: dict,
        done: set[Future],
        sizes: dict,
        meter: TokenizeMeter,
        prefix: Prefix,
        ready: set[int],
    ) -> None:
        """Count the ``done`` units in and mark their files ready to publish."""
        for future in done:
            pending.pop(future)
            index, documents, tokens, pid = future.result()
            meter.add(documents, sizes.pop(index), tokens)
            meter.workers.add(pid)
            meter.units_done += 1
            prefix.add(index, tokens)
            ready.add(index)
