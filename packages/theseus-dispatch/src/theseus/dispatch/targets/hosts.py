"""Detached processes on plain hosts (SSH targets and TPU VM workers).

Process ``i`` of a run is ``setsid nohup bash bootstrap.sh`` in its own process group,
with ``pid.i`` and ``log.i`` in the launch directory; it writes ``exit.i`` when done.
It survives the SSH session; cancelling kills its whole process group.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO

from theseus.dispatch.bootstrap import Paths, Submission, script
from theseus.dispatch.bundle import Bundle
from theseus.dispatch.launch import (
    ensure_bundle,
    launch_files,
    remove_launch,
    resolve_paths,
    write_launch,
)
from theseus.dispatch.remote import DispatchError, Shell, q
from theseus.dispatch.targets.base import (
    CANCELLED,
    FAILED,
    FINISHED,
    PREEMPTED,
    RUNNING,
    STARTING,
    UNKNOWN,
    Status,
    combine,
)


def start(shell: Shell, launch_dir: str, index: int, processes: int, coordinator: str) -> int:
    d = q(launch_dir)
    env = (
        f"THESEUS_PROCESS_ID={index} THESEUS_NUM_PROCESSES={processes} "
        f"THESEUS_COORDINATOR_ADDRESS={q(coordinator)}"
    )
    done = shell.run(
        f"cd {d} || exit 1; rm -f exit.{index} pid.{index}; "
        f"{env} nohup setsid bash {d}/bootstrap.sh > {d}/log.{index} 2>&1 < /dev/null & "
        f"pid=$!; echo $pid > {d}/pid.{index}.tmp && mv {d}/pid.{index}.tmp {d}/pid.{index} "
        f"&& echo $pid"
    )
    return int(done.stdout.strip())


def read_pids(shells: Sequence[Shell], launch_dir: str) -> list[int]:
    pids = []
    for index, shell in enumerate(shells):
        done = shell.run(f"cat {q(launch_dir)}/pid.{index}", check=False)
        if done.stdout.strip().isdigit():
            pids.append(int(done.stdout.strip()))
    return pids


def process_state(shell: Shell, launch_dir: str, index: int, record: str = "") -> tuple[str, Any]:
    """(state of process ``index``, the run's job.json when ``record`` names it)."""
    d = q(launch_dir)
    out = shell.run(
        f"if [ -f {d}/cancelled ]; then echo cancelled; "
        f"elif [ -f {d}/exit.{index} ]; then echo exit $(cat {d}/exit.{index}); "
        f"elif [ -f {d}/pid.{index} ] && kill -0 $(cat {d}/pid.{index}) 2>/dev/null; "
        f"then echo alive; elif [ -d {d} ]; then echo lost; else echo none; fi"
        + (f"; echo; cat {q(record)} 2>/dev/null; true" if record else "")
    ).stdout
    first, _, rest = out.partition("\n")
    words = first.split()
    if words[0] == "exit":
        state = {"0": FINISHED, "3": PREEMPTED}.get(words[1] if len(words) > 1 else "", FAILED)
    else:
        state = {"cancelled": CANCELLED, "alive": RUNNING, "lost": UNKNOWN}.get(words[0], "none")
    try:
        parsed = json.loads(rest) if rest.strip() else None
    except json.JSONDecodeError:
        parsed = None
    return state, parsed


def launch_on(
    shells: Sequence[Shell],
    target: Any,
    sub: Submission,
    bundle: Bundle,
    secrets: dict[str, str],
    addresses: list[str],
) -> dict[str, Any]:
    """Put the bundle and launch files on every host, then start every process.

    Any failure removes what was created (and stops what was started) before raising.
    """
    coordinator = f"{addresses[0]}:{target.coordinator_port}"
    touched: list[tuple[Shell, Paths]] = []
    started: list[tuple[Shell, str, int]] = []
    try:
        paths = [resolve_paths(s, target, sub.name, bundle.sha) for s in shells]
        for shell, p in zip(shells, paths, strict=True):
            ensure_bundle(shell, p, bundle, timeout=max(target.timeout, 120))
            text = script(sub, target, p, coordinator=coordinator)
            touched.append((shell, p))
            write_launch(shell, p, launch_files(sub, text, secrets), sub.attempt)
        for index, (shell, p) in enumerate(zip(shells, paths, strict=True)):
            pid = start(shell, p.launch_dir, index, len(shells), coordinator)
            started.append((shell, p.launch_dir, pid))
    except BaseException:
        for shell, _, pid in started:
            shell.run(f"kill -KILL -- -{pid} 2>/dev/null", check=False)
        for shell, p in touched:
            remove_launch(shell, p)
        raise
    return {
        "launch_dir": paths[0].launch_dir,
        "root": paths[0].root,
        "pids": [pid for _, _, pid in started],
        "coordinator": coordinator,
    }


def status_on(shells: Sequence[Shell], handle: dict[str, Any], name: str) -> Status:
    job_json = f"{handle['root']}/runs/{name}/job.json"
    states, record = [], None
    for i, shell in enumerate(shells):
        state, found = process_state(shell, handle["launch_dir"], i, job_json if i == 0 else "")
        states.append(UNKNOWN if state == "none" else state)
        record = record or found
    run_status = record.get("status") if record else None
    state = combine(states)
    if state == RUNNING and run_status != "running":
        state = STARTING  # installing, or the job has not opened its run yet
    detail = ", ".join(f"process {i}: {s}" for i, s in enumerate(states))
    return Status(state, detail, run_status, record.get("attempts") if record else None)


def logs_on(
    shell: Shell, handle: dict[str, Any], follow: bool, out: TextIO, index: int = 0
) -> None:
    d = q(handle["launch_dir"])
    if follow:
        command = f"tail -n +1 -F --pid=$(cat {d}/pid.{index}) {d}/log.{index} 2>/dev/null"
        shell.stream(command, out)
    else:
        done = shell.run(f"cat {d}/log.{index}", check=False)
        if done.rc != 0:
            raise DispatchError(f"{shell.label}: no log yet at {handle['launch_dir']}/log.{index}")
        out.write(done.stdout)


def cancel_on(shells: Sequence[Shell], handle: dict[str, Any], grace: float = 10.0) -> list[str]:
    d = q(handle["launch_dir"])
    stopped = []
    for index, shell in enumerate(shells):
        shell.run(f"touch {d}/cancelled", check=False)
        state = shell.run(
            f"p=$(cat {d}/pid.{index} 2>/dev/null) || exit 0; kill -0 $p 2>/dev/null || exit 0; "
            f"kill -TERM -- -$p; for i in $(seq {int(grace * 5)}); do "
            f"kill -0 $p 2>/dev/null || {{ echo stopped; exit 0; }}; sleep 0.2; done; "
            f"kill -KILL -- -$p; echo killed",
            timeout=grace + 10,
        ).stdout.strip()
        stopped.append(state or "not running")
    return stopped
