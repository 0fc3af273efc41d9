"""The ``slurm`` backend: an sbatch script that runs the bootstrap with ``srun`` on every node.

Commands run locally, or over SSH on a login node (``login``). The batch script resolves
the first node's address for the ``jax.distributed`` coordinator; each task's bootstrap
takes its process id and count from ``SLURM_PROCID`` / ``SLURM_NTASKS``. Task ``i`` logs
to ``log.i`` in the launch directory (on the shared file system) and writes ``exit.i``.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

from theseus.dispatch.bootstrap import Paths, Submission, plan_text, script
from theseus.dispatch.bundle import Bundle
from theseus.dispatch.launch import (
    ensure_bundle,
    launch_files,
    remove_launch,
    resolve_paths,
    write_launch,
)
from theseus.dispatch.remote import DispatchError, LocalShell, Shell, SSHShell, q
from theseus.dispatch.script_values import check_sbatch
from theseus.dispatch.targets.base import (
    CANCELLED,
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    STARTING,
    UNKNOWN,
    Backend,
    Request,
    Status,
    combine,
)

SAFE = re.compile(r"^[A-Za-z0-9_.:,=/@%+-]+$")
UNUSABLE = ("down", "drain", "drng", "fail", "maint", "inval", "unk", "futr", "npc", "resv")
QUEUED = {"PENDING": PENDING, "CONFIGURING": STARTING, "RUNNING": RUNNING, "COMPLETING": RUNNING}


def job_name(run: str) -> str:
    return f"theseus-{run}"


class SlurmBackend(Backend):
    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        for key in ("partition", "account", "qos", "time", "mem", "gres"):
            value = getattr(config, key)
            if value is not None and not SAFE.match(value):
                raise DispatchError(f"target {name!r}: key {key!r} has odd characters: {value!r}")
        for arg in config.sbatch_args:
            if not SAFE.match(arg):
                raise DispatchError(
                    f"target {name!r}: sbatch_args entry {arg!r} has odd characters"
                )
        self._shell: Shell | None = None

    # ------------------------------------------------------------------ plumbing
    @property
    def shell(self) -> Shell:
        if self._shell is None:
            if self.config.login:
                self._shell = SSHShell(self.config.login, self.config, timeout=self.config.timeout)
            else:
                self._shell = LocalShell(timeout=self.config.timeout)
        return self._shell

    def slurm(self, command: str, check: bool = True):
        prefix = (
            f"export SLURM_CONF={q(self.config.slurm_conf)}; " if self.config.slurm_conf else ""
        )
        return self.shell.run(prefix + command, check=check)

    # ------------------------------------------------------------------ solving
    def available(self, request: Request, nodes: int) -> str | None:
        try:
            done = self.slurm("sinfo -h -o '%P|%a|%D|%t|%G'", check=False)
        except DispatchError as error:
            return str(error)
        if done.rc != 0:
            return f"sinfo failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
        usable: dict[str, int] = {}
        states: dict[str, str] = {}
        for line in done.stdout.split("\n"):
            if not line.strip():
                continue
            part, avail, count, state, gres = line.split("|")
            default = part.endswith("*")
            part = part.rstrip("*")
            if self.config.partition and part != self.config.partition:
                continue
            if not self.config.partition and not default:
                continue
            if avail != "up":
                states[part] = f"partition {part} is {avail}"
                continue
            if state.rstrip("*~#!%$@^-").startswith(UNUSABLE):
                continue
            if self.config.chip != "cpu" and _gres_count(gres) < self.config.chips_per_node:
                continue
            usable[part] = usable.get(part, 0) + int(count)
        wanted = self.config.partition or "(default)"
        if not usable and states:
            return "; ".join(states.values())
        have = max(usable.values(), default=0)
        if have < nodes:
            gres = (
                f" with {self.config.chips_per_node} GRES chip(s)"
                if self.config.chip != "cpu"
                else ""
            )
            return f"partition {wanted}: {have} usable node(s){gres}, needs {nodes}"
        return None

    # ------------------------------------------------------------------ the batch script
    def batch_script(self, sub: Submission, launch_dir: str) -> str:
        c = self.config
        d = launch_dir
        where = f"target {self.name!r}: the launch folder (workdir/launches/<run>)"
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name={check_sbatch('the job name', job_name(sub.name))}",
            f"#SBATCH --nodes={int(sub.nodes)}",
            "#SBATCH --ntasks-per-node=1",
            f"#SBATCH --output={check_sbatch(where, d + '/slurm.out')}",
        ]
        options = {
            "partition": c.partition, "account": c.account, "qos": c.qos, "time": c.time,
            "mem": c.mem, "cpus-per-task": c.cpus_per_task,
        }  # fmt: skip
        lines += [
            f"#SBATCH --{k}={check_sbatch(f'target {self.name!r}: key {k!r}', str(v))}"
            for k, v in options.items()
            if v is not None
        ]
        if c.chip != "cpu":
            gres = check_sbatch(f"target {self.name!r}: key 'gres'", c.gres or "gpu")
            lines.append(f"#SBATCH --gres={gres}:{int(c.chips_per_node)}")
        lines += [
            f"#SBATCH {check_sbatch(f'target {self.name!r}: sbatch_args', a)}"
            for a in c.sbatch_args
        ]
        lines += [
            "unset THESEUS_PROCESS_ID THESEUS_NUM_PROCESSES",
            'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "addr=$(scontrol show node \"$first\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
            f'export THESEUS_COORDINATOR_ADDRESS="${{addr:-$first}}:{int(c.coordinator_port)}"',
            f"srun --kill-on-bad-exit=1 --output={q(d)}/log.%t bash {q(d)}/bootstrap.sh",
            "",
        ]
        return "\n".join(lines)

    def _paths(self, run: str, sha: str | None) -> Paths:
        return resolve_paths(self.shell, self.config, run, sha)

    def plan(self, sub: Submission) -> str:
        paths = Paths.planned(self.config, sub.name)
        text = script(sub, self.config, paths)
        where = f"over SSH on {self.config.login}" if self.config.login else "locally"
        header = plan_text(
            [("target", f"{self.name} (slurm, sbatch {where})"), ("nodes", str(sub.nodes))]
        )
        return f"{header}\n--- job.sbatch\n{self.batch_script(sub, paths.launch_dir)}--- bootstrap.sh (each task)\n{text}"

    # ------------------------------------------------------------------ lifecycle
    def launch(self, sub: Submission, bundle: Bundle, secrets: dict[str, str]) -> dict[str, Any]:
        paths = self._paths(sub.name, bundle.sha)
        ensure_bundle(self.shell, paths, bundle, timeout=max(self.config.timeout, 120))
        text = script(sub, self.config, paths)
        files = launch_files(
            sub, text, secrets, {"job.sbatch": self.batch_script(sub, paths.launch_dir)}
        )
        try:
            write_launch(self.shell, paths, files, sub.attempt)
            done = self.slurm(
                f"cd {q(paths.launch_dir)} && sbatch --parsable job.sbatch", check=False
            )
        except BaseException:
            remove_launch(self.shell, paths)
            raise
        if done.rc != 0:
            remove_launch(self.shell, paths)
            message = " ".join((done.stderr or done.stdout).split())
            raise DispatchError(f"sbatch refused the job on {self.name}: {message}")
        job_id = done.stdout.strip().split(";")[0]
        self.shell.run(f"echo {q(job_id)} > {q(paths.launch_dir)}/slurm_job_id")
        return {
            "job_id": job_id, "launch_dir": paths.launch_dir, "root": paths.root, "nodes": sub.nodes,
        }  # fmt: skip

    def find(self, sub: Submission) -> dict[str, Any] | None:
        paths = self._paths(sub.name, None)
        done = self.slurm(f"squeue -h -n {q(job_name(sub.name))} -o %i")
        ids = done.stdout.split()
        handle = {"launch_dir": paths.launch_dir, "root": paths.root, "nodes": sub.nodes}
        if ids:
            return {**handle, "job_id": ids[0]}
        saved = self.shell.run(f"cat {q(paths.launch_dir)}/slurm_job_id", check=False)
        if (
            saved.rc == 0
            and self.status({**handle, "job_id": saved.stdout.strip()}, sub.name).state == FINISHED
        ):
            return {**handle, "job_id": saved.stdout.strip()}
        return None

    def status(self, handle: dict[str, Any], name: str = "") -> Status:
        name = name or handle.get("name", "")
        d = q(handle["launch_dir"])
        queued = self.slurm(f"squeue -h -j {q(handle['job_id'])} -o %T", check=False).stdout.split()
        files = self.shell.run(
            f'cd {d} 2>/dev/null && {{ ls; echo ---; for f in exit.*; do [ -f "$f" ] && echo "$f $(cat $f)"; done; '
            f"echo ---; cat {q(handle['root'] + '/runs/' + name + '/job.json')} 2>/dev/null; }}; true"
        ).stdout
        listing, _, rest = files.partition("---")
        exits_text, _, record_text = rest.partition("---")
        run_status, attempts = None, None
        if '"status"' in record_text:
            import json

            try:
                record = json.loads(record_text)
                run_status, attempts = record.get("status"), record.get("attempts")
            except (json.JSONDecodeError, AttributeError):
                run_status = None
        exits = dict(
            line.split() for line in exits_text.strip().splitlines() if len(line.split()) == 2
        )
        if "cancelled" in listing.split():
            return Status(CANCELLED, f"job {handle['job_id']}", run_status, attempts)
        if queued and queued[0] in QUEUED:
            state = QUEUED[queued[0]]
            if state == RUNNING and run_status != "running":
                state = STARTING
            return Status(state, f"job {handle['job_id']} {queued[0]}", run_status, attempts)
        states = [
            (FINISHED if exits.get(f"exit.{i}") == "0" else FAILED)
            if f"exit.{i}" in exits
            else UNKNOWN
            for i in range(int(handle.get("nodes", 1)))
        ]
        state = combine(states)
        if state == UNKNOWN and not queued:
            state = FAILED if listing.strip() else UNKNOWN
        detail = f"job {handle['job_id']}: " + ", ".join(
            f"task {i}: {s}" for i, s in enumerate(states)
        )
        return Status(state, detail, run_status, attempts)

    def logs(self, handle: dict[str, Any], follow: bool, out: TextIO) -> None:
        d = q(handle["launch_dir"])
        if not follow:
            done = self.shell.run(
                f"if [ -f {d}/log.0 ]; then cat {d}/log.0; else cat {d}/slurm.out; fi", check=False
            )
            if done.rc != 0:
                raise DispatchError(f"no log yet in {handle['launch_dir']} (job still queued?)")
            out.write(done.stdout)
            return
        prefix = (
            f"export SLURM_CONF={q(self.config.slurm_conf)}; " if self.config.slurm_conf else ""
        )
        job = q(handle["job_id"])
        self.shell.stream(
            f"{prefix}while [ ! -f {d}/log.0 ] && squeue -h -j {job} 2>/dev/null | grep -q .; do sleep 1; done; "
            f"tail -n +1 -F {d}/log.0 2>/dev/null & t=$!; "
            f"while squeue -h -j {job} 2>/dev/null | grep -q .; do sleep 1; done; sleep 1; kill $t",
            out,
        )

    def cancel(self, handle: dict[str, Any]) -> str:
        d = q(handle["launch_dir"])
        self.shell.run(f"touch {d}/cancelled", check=False)
        done = self.slurm(f"scancel {q(handle['job_id'])}", check=False)
        if done.rc != 0:
            raise DispatchError(
                f"scancel {handle['job_id']}: {(done.stderr or done.stdout).strip()}"
            )
        return f"scancel {handle['job_id']}"

    def close(self) -> None:
        if self._shell is not None:
            self._shell.close()


def _gres_count(gres: str) -> int:
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts and parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total
