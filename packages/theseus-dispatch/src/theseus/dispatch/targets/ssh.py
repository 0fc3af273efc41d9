"""The ``ssh`` backend: Fabric to one or more hosts, one detached process per host."""

from __future__ import annotations

from typing import Any, TextIO

from theseus.dispatch.bootstrap import Paths, Submission, plan_text, script
from theseus.dispatch.bundle import Bundle
from theseus.dispatch.remote import DispatchError, SSHShell, split_host
from theseus.dispatch.targets import hosts
from theseus.dispatch.targets.base import ACTIVE, FINISHED, Backend, Request, Status


class SSHBackend(Backend):
    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        if not config.hosts:
            raise DispatchError(f"target {name!r}: key 'hosts' lists no host")
        self._shells: dict[str, SSHShell] = {}

    def shell(self, host: str) -> SSHShell:
        if host not in self._shells:
            self._shells[host] = SSHShell(host, self.config, timeout=self.config.timeout)
        return self._shells[host]

    def hosts_for(self, nodes: int) -> list[str]:
        return self.config.hosts[:nodes]

    def available(self, request: Request, nodes: int) -> str | None:
        if nodes > len(self.config.hosts):
            return f"needs {nodes} hosts, has {len(self.config.hosts)}"
        for host in self.hosts_for(nodes):
            try:
                shell = self.shell(host)
            except DispatchError as error:
                return str(error)
            if self.config.chip == "cpu":
                continue
            done = shell.run(
                "nvidia-smi --query-gpu=uuid --format=csv,noheader && echo -- && "
                "nvidia-smi --query-compute-apps=gpu_uuid --format=csv,noheader",
                check=False,
            )
            if done.rc != 0:
                return f"{shell.label}: nvidia-smi failed ({done.stderr.strip() or done.rc})"
            gpus, _, busy = done.stdout.partition("--")
            free = set(gpus.split()) - set(busy.split())
            if len(free) < self.config.chips_per_node:
                return (
                    f"{shell.label}: {len(free)} of {len(gpus.split())} GPUs free, "
                    f"needs {self.config.chips_per_node}"
                )
        return None

    def plan(self, sub: Submission) -> str:
        chosen = self.hosts_for(sub.nodes)
        first = split_host(chosen[0], self.config.port)[1]
        coordinator = f"{first}:{self.config.coordinator_port}"
        text = script(
            sub, self.config, Paths.planned(self.config, sub.name), coordinator=coordinator
        )
        header = plan_text(
            [
                ("target", f"{self.name} (ssh)"),
                ("hosts", ", ".join(chosen)),
                ("root", self.config.root),
            ]
        )
        return f"{header}\n--- bootstrap.sh (each host; THESEUS_PROCESS_ID = host index)\n{text}"

    def launch(self, sub: Submission, bundle: Bundle, secrets: dict[str, str]) -> dict[str, Any]:
        chosen = self.hosts_for(sub.nodes)
        shells = [self.shell(h) for h in chosen]  # connect to all before creating anything
        addresses = [split_host(h, self.config.port)[1] for h in chosen]
        handle = hosts.launch_on(shells, self.config, sub, bundle, secrets, addresses)
        return {**handle, "hosts": chosen}

    def _shells_of(self, handle: dict[str, Any]) -> list[SSHShell]:
        return [self.shell(h) for h in handle["hosts"]]

    def find(self, sub: Submission) -> dict[str, Any] | None:
        from theseus.dispatch.launch import resolve_paths

        chosen = self.hosts_for(sub.nodes)
        paths = resolve_paths(self.shell(chosen[0]), self.config, sub.name, None)
        handle: dict[str, Any] = {
            "hosts": chosen,
            "launch_dir": paths.launch_dir,
            "root": paths.root,
        }
        state = self.status(handle, sub.name).state
        if state not in (*ACTIVE, FINISHED):
            return None
        handle["pids"] = hosts.read_pids(self._shells_of(handle), handle["launch_dir"])
        return handle

    def status(self, handle: dict[str, Any], name: str = "") -> Status:
        name = name or handle.get("name", "")
        return hosts.status_on(self._shells_of(handle), handle, name)

    def logs(self, handle: dict[str, Any], follow: bool, out: TextIO) -> None:
        hosts.logs_on(self._shells_of(handle)[0], handle, follow, out)

    def cancel(self, handle: dict[str, Any]) -> str:
        stopped = hosts.cancel_on(self._shells_of(handle), handle)
        return ", ".join(f"{h}: {s}" for h, s in zip(handle["hosts"], stopped, strict=True))

    def close(self) -> None:
        for shell in self._shells.values():
            shell.close()
        self._shells.clear()
