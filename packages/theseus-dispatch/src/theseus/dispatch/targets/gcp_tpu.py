"""The ``gcp-tpu`` backend: a TPU VM per run, the bootstrap on every worker over SSH.

The VM (``theseus-<run>``) is created through ``gcloud compute tpus tpu-vm`` where gcloud is
installed (``use_gcloud``), else through the TPU v2 REST API with a bearer token. Its
workers' addresses come from the node's ``networkEndpoints``; each worker runs process
``i`` detached, as on an ``ssh`` target. A VM this backend created is deleted when a launch
on it fails, on ``cancel`` with ``delete_when_done``, and when ``status`` sees the run end
with ``delete_when_done``. A preempted VM is recreated on resubmission (the run resumes
from its checkpoint in the shared root).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any, TextIO

from theseus.dispatch.bootstrap import Paths, Submission, plan_text, script
from theseus.dispatch.bundle import Bundle
from theseus.dispatch.remote import DispatchError, SSHShell
from theseus.dispatch.targets import hosts
from theseus.dispatch.targets.base import (
    ACTIVE,
    FAILED,
    FINISHED,
    UNKNOWN,
    Backend,
    Request,
    Status,
)

GONE = ("PREEMPTED", "TERMINATED", "STOPPED")


def node_name(run: str) -> str:
    name = re.sub(r"[^a-z0-9-]", "-", f"theseus-{run.lower()}")[:63].rstrip("-")
    return name


class GcloudAPI:
    """``gcloud compute tpus tpu-vm ...`` with ``--format=json``."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.env = dict(os.environ)
        if config.api_endpoint:
            self.env["CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU"] = config.api_endpoint
        self.env.setdefault("CLOUDSDK_CORE_DISABLE_PROMPTS", "1")

    def _run(self, *args: str, timeout: float | None = None, missing_ok: bool = False) -> Any:
        c = self.config
        command = [
            "gcloud",
            "compute",
            "tpus",
            *args,
            f"--zone={c.zone}",
            f"--project={c.project}",
            "--format=json",
        ]
        try:
            done = subprocess.run(
                command, env=self.env, capture_output=True, text=True, timeout=timeout or c.timeout
            )
        except subprocess.TimeoutExpired as error:
            raise DispatchError(
                f"gcloud {' '.join(args[:2])}: timed out after {error.timeout:.0f} s"
            ) from error
        if done.returncode != 0:
            message = " ".join(done.stderr.split())
            if missing_ok and "NOT_FOUND" in message:
                return None
            message = message.split(") ", 1)[-1].split(" This command is authenticated")[0]
            raise DispatchError(f"gcloud {' '.join(args[:2])}: {message}")
        return json.loads(done.stdout) if done.stdout.strip() else {}

    def accelerator(self, kind: str) -> Any:
        return self._run("tpu-vm", "accelerator-types", "describe", kind, missing_ok=True)

    def get(self, node: str) -> Any:
        return self._run("tpu-vm", "describe", node, missing_ok=True)

    def create(self, node: str, timeout: float) -> Any:
        c = self.config
        args = [
            "tpu-vm",
            "create",
            node,
            f"--accelerator-type={c.accelerator_type}",
            f"--version={c.runtime_version}",
        ]
        if c.spot:
            args.append("--spot")
        return self._run(*args, timeout=timeout)

    def delete(self, node: str, timeout: float) -> None:
        self._run("tpu-vm", "delete", node, "--quiet", timeout=timeout, missing_ok=True)


class RestAPI:
    """The TPU v2 REST API (``tpu.googleapis.com``), for machines without gcloud."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.base = (config.api_endpoint or "https://tpu.googleapis.com/").rstrip("/")
        self.parent = f"projects/{config.project}/locations/{config.zone}"
        self.token = os.environ.get(config.access_token_env, "")
        if not self.token:
            raise DispatchError(
                f"the TPU REST API needs an access token in ${config.access_token_env}"
            )

    def _call(self, method: str, path: str, body: Any = None, missing_ok: bool = False) -> Any:
        request = urllib.request.Request(
            f"{self.base}/v2/{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            if missing_ok and error.code == 404:
                return None
            try:
                detail = json.loads(error.read()).get("error", {})
                message = (
                    f"{detail.get('status', error.code)}: {detail.get('message', error.reason)}"
                )
            except ValueError:
                message = f"{error.code} {error.reason}"
            raise DispatchError(f"TPU API {method} {path.split('/')[-1]}: {message}") from error
        except (urllib.error.URLError, OSError) as error:
            raise DispatchError(f"TPU API at {self.base}: cannot connect ({error})") from error

    def _wait(self, operation: dict, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while not operation.get("done"):
            if time.monotonic() > deadline:
                raise DispatchError(
                    f"TPU operation {operation.get('name')} not done after {timeout:.0f} s"
                )
            time.sleep(2)
            operation = self._call("GET", operation["name"])
        if "error" in operation:
            raise DispatchError(f"TPU operation failed: {operation['error'].get('message')}")
        return operation.get("response", {})

    def accelerator(self, kind: str) -> Any:
        return self._call("GET", f"{self.parent}/acceleratorTypes/{kind}", missing_ok=True)

    def get(self, node: str) -> Any:
        return self._call("GET", f"{self.parent}/nodes/{node}", missing_ok=True)

    def create(self, node: str, timeout: float) -> Any:
        c = self.config
        body: dict[str, Any] = {
            "acceleratorType": c.accelerator_type,
            "runtimeVersion": c.runtime_version,
        }
        if c.spot:
            body["schedulingConfig"] = {"spot": True}
        operation = self._call("POST", f"{self.parent}/nodes?nodeId={node}", body)
        self._wait(operation, timeout)
        return self.get(node)

    def delete(self, node: str, timeout: float) -> None:
        operation = self._call("DELETE", f"{self.parent}/nodes/{node}", missing_ok=True)
        if operation is not None:
            self._wait(operation, timeout)


class TpuBackend(Backend):
    create_timeout = 900.0

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        self._api: Any = None
        self._shells: dict[tuple[int, str], SSHShell] = {}

    def api(self) -> Any:
        if self._api is None:
            use_gcloud = self.config.use_gcloud and shutil.which("gcloud")
            self._api = GcloudAPI(self.config) if use_gcloud else RestAPI(self.config)
        return self._api

    def shells(self, addresses: list[str]) -> list[SSHShell]:
        out = []
        for index, address in enumerate(addresses):
            key = (index, address)
            if key not in self._shells:
                self._shells[key] = SSHShell(
                    f"{address}:{self.config.port}", self.config, self.config.timeout
                )
            out.append(self._shells[key])
        return out

    def available(self, request: Request, nodes: int) -> str | None:
        kind = self.config.accelerator_type
        try:
            found = self.api().accelerator(kind)
        except DispatchError as error:
            return str(error)
        return None if found else f"accelerator type {kind} is not offered in {self.config.zone}"

    def plan(self, sub: Submission) -> str:
        c = self.config
        coordinator = f"<worker 0>:{c.coordinator_port}"
        text = script(sub, c, Paths.planned(c, sub.name), coordinator=coordinator)
        api = "gcloud" if c.use_gcloud and shutil.which("gcloud") else "REST"
        header = plan_text(
            [
                ("target", f"{self.name} (gcp-tpu via {api})"),
                ("TPU VM", f"{node_name(sub.name)}: {c.accelerator_type}, {c.runtime_version}, {c.zone}"
                 + (", spot" if c.spot else "")),
                ("workers", f"{sub.nodes}, a process each with {c.chips_per_node} {c.chip} chip(s)"
                 + " (an existing VM of that name is used as it is)"),
            ]
        )  # fmt: skip
        return f"{header}\n--- bootstrap.sh (each worker)\n{text}"

    def _addresses(self, node: dict) -> list[str]:
        endpoints = node.get("networkEndpoints") or []
        addresses = [e.get("ipAddress") for e in endpoints if e.get("ipAddress")]
        if not addresses:
            raise DispatchError(f"TPU VM {node.get('name')} has no worker addresses yet")
        return addresses

    def launch(self, sub: Submission, bundle: Bundle, secrets: dict[str, str]) -> dict[str, Any]:
        api, name = self.api(), node_name(sub.name)
        node = api.get(name)
        if node is not None and node.get("state") in GONE:
            api.delete(name, self.create_timeout)  # preempted: recreate, the run resumes
            node = None
        created = node is None
        if created:
            node = api.create(name, self.create_timeout) or api.get(name)
        try:
            addresses = self._addresses(node)
            if len(addresses) != sub.nodes:  # the plan's workers, or no launch
                raise DispatchError(
                    f"TPU VM {name} ({self.config.accelerator_type}) has {len(addresses)} "
                    f"worker(s), and the plan {sub.nodes}: set target {self.name!r}'s nodes "
                    f"to {len(addresses)} (and chips_per_node to its chips per worker)"
                )
            handle = hosts.launch_on(
                self.shells(addresses), self.config, sub, bundle, secrets, addresses
            )
        except BaseException:
            if created:
                api.delete(name, self.create_timeout)
            raise
        return {**handle, "node": name, "addresses": addresses, "created": created}

    def find(self, sub: Submission) -> dict[str, Any] | None:
        from theseus.dispatch.launch import resolve_paths

        node = self.api().get(node_name(sub.name))
        if node is None or node.get("state") in GONE:
            return None
        addresses = self._addresses(node)
        paths = resolve_paths(self.shells(addresses)[0], self.config, sub.name, None)
        handle: dict[str, Any] = {
            "node": node_name(sub.name), "addresses": addresses, "launch_dir": paths.launch_dir,
            "root": paths.root, "name": sub.name,
        }  # fmt: skip
        state = self.status(handle).state
        if state not in (*ACTIVE, FINISHED):
            return None
        handle["pids"] = hosts.read_pids(self.shells(addresses), paths.launch_dir)
        return handle

    def status(self, handle: dict[str, Any]) -> Status:
        node = self.api().get(handle["node"])
        if node is None:
            return Status(UNKNOWN, f"TPU VM {handle['node']} does not exist")
        if node.get("state") in GONE:
            return Status(FAILED, f"TPU VM {handle['node']} is {node['state']}")
        result = hosts.status_on(self.shells(handle["addresses"]), handle, handle.get("name", ""))
        result.detail = f"TPU VM {handle['node']} {node.get('state')}; {result.detail}"
        if result.state in (FINISHED, FAILED) and self.config.delete_when_done:
            self.api().delete(handle["node"], self.create_timeout)
            result.detail += "; VM deleted"
        return result

    def logs(self, handle: dict[str, Any], follow: bool, out: TextIO) -> None:
        hosts.logs_on(self.shells(handle["addresses"])[0], handle, follow, out)

    def cancel(self, handle: dict[str, Any]) -> str:
        stopped = hosts.cancel_on(self.shells(handle["addresses"]), handle)
        detail = ", ".join(f"worker {i}: {s}" for i, s in enumerate(stopped))
        if self.config.delete_when_done:
            self.api().delete(handle["node"], self.create_timeout)
            detail += f"; deleted TPU VM {handle['node']}"
        return detail

    def close(self) -> None:
        for shell in self._shells.values():
            shell.close()
