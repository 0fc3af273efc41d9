"""Orbax checkpoints: asynchronous saves, keep-last-K plus every M-th, verified restores.

A checkpoint holds the train state (parameters, optimizer state, step, skipped-step count),
the RNG key data and a JSON record: the step (also the data position, since the batch at
step s is a pure function of the seed and s) and a digest of every saved array.

A restore first compares the checkpoint's shapes with the ones the config builds (a
mismatch is a config error, named by path), then checks each restored array's digest. A
checkpoint that cannot be read or fails its digests is moved to ``checkpoints.torn/`` and
the previous one is tried; when none is readable, nothing is moved and the run stops.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from theseus.core.errors import TheseusError, one_line
from theseus.core.rundir import committed_steps
from theseus.core.train.digest import array_digests, path_name

log = logging.getLogger(__name__)
for _noisy in ("absl", "orbax"):
    logging.getLogger(_noisy).setLevel(logging.WARNING)


class CheckpointError(TheseusError):
    """Checkpoints exist but none can be restored."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint holds other shapes than the config builds (not damage: another model)."""


class CheckpointDigestError(CheckpointError):
    """Restored arrays do not match the digests written when the checkpoint was saved."""


class Checkpoints:
    """A run's checkpoint folder: :meth:`writer` for the run that trains, :meth:`reader` for
    everything that only reads it (opening a run, branching, time travel)."""

    def __init__(
        self, directory: Path, keep_last: int, keep_every: int, asynchronous: bool
    ) -> None:
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max(1, keep_last),
            keep_period=keep_every or None,
            enable_async_checkpointing=asynchronous,
            create=True,
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options)
        self.failed_read = False  # a read failed: closing may print Orbax's leftovers

    @classmethod
    def writer(cls, directory: Path, config: Any, asynchronous: bool | None = None) -> Checkpoints:
        """Saves with the cadence and retention of ``config`` (a ``CheckpointConfig``)."""
        background = config.asynchronous if asynchronous is None else asynchronous
        return cls(directory, config.keep_last, config.keep_every, background)

    @classmethod
    def reader(cls, directory: Path) -> Checkpoints:
        """Reads only: keeps everything it finds, writes nothing."""
        return cls(directory, keep_last=1_000_000, keep_every=0, asynchronous=False)

    def steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def committed(self) -> list[int]:
        """Steps whose save has finished on disk."""
        return committed_steps(self.directory)

    def save(self, step: int, state: Any, rng_data: Any, meta: dict) -> None:
        rng = {"key_data": rng_data}
        meta = {**meta, "arrays": describe_arrays({"state": state, "rng": rng})}
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            rng=ocp.args.StandardSave(rng),
            meta=ocp.args.JsonSave(meta),
        )
        self.manager.save(step, args=args, force=True)

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def restore(self, step: int, abstract_state: Any, abstract_rng: Any) -> tuple[Any, Any, dict]:
        meta = self.read_meta(step)
        saved = meta.get("arrays")  # checkpoints written before this record have none
        if saved is not None:
            self.check_shapes(step, saved, abstract_state)
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state),
            rng=ocp.args.StandardRestore({"key_data": abstract_rng}),
        )
        try:
            with _held_stderr(drop_on_error=True):
                restored = self.manager.restore(step, args=args)
        except Exception:
            self.failed_read = True
            raise
        if saved is not None:
            actual = describe_arrays({"state": restored["state"], "rng": restored["rng"]})
            bad = sorted(k for k in saved if saved[k] != actual.get(k))
            if bad:
                raise CheckpointDigestError(
                    f"{len(bad)} array(s) differ from what was saved (first: {bad[0]})"
                )
        return restored["state"], restored["rng"]["key_data"], meta

    def read_meta(self, step: int) -> dict:
        """The checkpoint's JSON record. Read as the file Orbax's JSON handler writes when it
        is there: a second Orbax read before the arrays' leaves, on a damaged checkpoint,
        reads that fail later and print tracebacks from Orbax's threads."""
        path = self.directory / str(step) / "meta" / "metadata"
        if path.is_file():
            return dict(json.loads(path.read_text()))
        args = ocp.args.Composite(meta=ocp.args.JsonRestore())
        return dict(self.manager.restore(step, args=args)["meta"])

    def check_shapes(self, step: int, saved: dict, abstract_state: Any) -> None:
        """Refuse a checkpoint whose arrays have other shapes or dtypes than the config's."""
        stored = {k[len("state.") :]: v[:2] for k, v in saved.items() if k.startswith("state.")}
        wanted = {k: v[:2] for k, v in describe_arrays(abstract_state, digests=False).items()}
        for name in sorted(set(stored) | set(wanted)):
            if stored.get(name) != wanted.get(name):
                raise CheckpointMismatchError(
                    f"checkpoint {step} in {self.directory} holds {name} as "
                    f"{_describe(stored.get(name))} but this config builds "
                    f"{_describe(wanted.get(name))}: it was saved by another model or optimizer "
                    "config"
                )

    def restore_latest(
        self, abstract_state: Any, abstract_rng: Any
    ) -> tuple[int, Any, Any, dict] | None:
        """The run's own newest readable checkpoint; older ones on failure (the unreadable
        ones are set aside, so their steps are trained again). Only for the run that owns
        the folder: a reader opens an exact step (``open_run``) and never moves anything."""
        steps = self.steps()
        if not steps:
            return None
        failures = []
        for step in reversed(steps):
            try:
                state, rng, meta = self.restore(step, abstract_state, abstract_rng)
            except CheckpointMismatchError:
                raise
            except Exception as error:  # torn, unreadable or corrupt: try the previous one
                reason = _short(one_line(error), type(error).__name__)
                log.warning(
                    "checkpoint %d in %s is unreadable (%s); trying the previous one",
                    step,
                    self.directory,
                    reason,
                )
                failures.append(f"{step} ({reason})")
                continue
            self._set_aside([int(f.split()[0]) for f in failures])
            return step, state, rng, meta
        raise CheckpointError(
            f"no checkpoint in {self.directory} can be restored ({'; '.join(failures)}); "
            "nothing was moved: if the files are damaged, rerun with --fresh to start over"
        )

    def _set_aside(self, steps: list[int]) -> None:
        """Move unreadable checkpoints to ``checkpoints.torn/`` so their steps can be redone."""
        if not steps:
            return
        aside = self.directory.parent / f"{self.directory.name}.torn"
        aside.mkdir(exist_ok=True)
        for step in steps:
            target = aside / str(step)
            suffix = 0
            while target.exists():
                suffix += 1
                target = aside / f"{step}.{suffix}"
            (self.directory / str(step)).rename(target)
            log.warning("moved unreadable checkpoint %d to %s", step, target)
        self.manager.reload()

    def close(self) -> None:
        with _held_stderr(drop=self.failed_read):
            self.manager.wait_until_finished()
            self.manager.close()
            if self.failed_read:
                gc.collect()


def abstract_of(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of a pytree of arrays."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        tree,
    )


def describe_arrays(tree: Any, digests: bool = True) -> dict[str, list]:
    """``{path: [dtype, shape, digest]}`` of the array leaves of ``tree`` (JSON-ready)."""
    flat = [
        (path_name(path), leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype")
    ]
    described = {name: [str(leaf.dtype), list(leaf.shape)] for name, leaf in flat}
    if digests:
        for name, digest in array_digests(tree).items():
            described[name].append(digest)
    return described


def _describe(entry: list | None) -> str:
    return "nothing" if entry is None else f"{entry[0]}{list(entry[1])}"


def _short(text: str, kind: str) -> str:
    text = text if len(text) <= 160 else text[:157] + "..."
    return text if text.startswith(kind) else f"{kind}: {text}"


@contextmanager
def _held_stderr(drop: bool = False, drop_on_error: bool = False) -> Iterator[None]:
    """Hold file descriptor 2 for the block; write what was held out after it, unless
    ``drop`` (or ``drop_on_error`` and the block raised). A failed Orbax read leaves
    TensorStore callbacks behind that print tracebacks from their own threads ("Event loop
    is closed") as it fails and when the manager closes: the failure is reported as it is,
    so that output is dropped."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            drop = drop or drop_on_error
            if drop:  # the failed read's callbacks fire as its reads wind down
                time.sleep(0.5)
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if not drop:
                held.seek(0)
                sys.stderr.write(held.read().decode(errors="replace"))
