"""The tokenize job's worker processes: started with spawn, and ended with the job however
the job ends, a signal included (:mod:`theseus.core.stop`): no worker, and so no
multiprocessing resource tracker (which lives as long as one of them), outlives it.

A worker ignores SIGINT and SIGTERM (Ctrl-C reaches the whole process group); the job
decides: asked to stop, it cancels the units not started, gives the running ones
:data:`STOP_GRACE_SECONDS` to finish (their files are then published too) and kills the
workers still busy (a unit file is written aside and renamed, so none is left half
written under its own name).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from typing import Any

from theseus.core import stop
from theseus.data.tokenize.units import init_worker

STOP_GRACE_SECONDS = 5.0  # a unit in progress gets this long to finish once a stop is asked
POLL_SECONDS = 0.2  # how often a wait for units looks whether a stop was asked for


@contextmanager
def worker_pool(workers: int, tokenizer_dir: str) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``workers`` spawned processes; on leaving, the workers end: after their
    units when the block ended normally, at once (killed) otherwise."""
    before = set(multiprocessing.active_children())
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, context, init_worker, (tokenizer_dir,))
    ended_normally = False
    try:
        yield pool
        ended_normally = True
    finally:
        if not ended_normally:
            kill_workers(before)
        pool.shutdown(wait=True, cancel_futures=True)


def kill_workers(before: set[Any]) -> None:
    """Kill the processes this process started since ``before`` (a pool's workers)."""
    started = [p for p in multiprocessing.active_children() if p not in before]
    for process in started:
        process.kill()
    for process in started:
        process.join(timeout=10)


def finished_some(pending: dict[Future, int]) -> set[Future]:
    """The units that finished: waits until one does, or until a stop is asked for (then
    possibly none)."""
    while True:
        done, _ = wait(list(pending), timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
        if done or stop.requested.is_set():
            return done


def finish_running(pending: dict[Future, int]) -> set[Future]:
    """A stop was asked for: cancel the units not started, and give the running ones
    :data:`STOP_GRACE_SECONDS`; the futures that completed (successfully) by then."""
    for future in pending:
        future.cancel()
    running = [future for future in pending if not future.cancelled()]
    done, _ = wait(running, timeout=STOP_GRACE_SECONDS)
    return {future for future in done if future.exception() is None}
