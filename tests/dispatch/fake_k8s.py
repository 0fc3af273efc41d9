"""A small Kubernetes API server on loopback: the calls the volcano backend makes, no more.

It stores ConfigMaps, Secrets and Volcano Jobs, plays the Volcano controller just enough
(a created Job gets one Pending pod per replica; the test moves phases along), answers pod
lists by label and pod logs, and records every request with its bearer token.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from fake_http import FakeHTTP

TOKEN = "fake-k8s-token"
NS = r"/namespaces/(?P<ns>[^/]+)"


class FakeKubernetes(FakeHTTP):
    token = TOKEN

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, ns, name)
        self.queues: dict[str, str] = {"default": "Open"}
        self.pod_logs: dict[str, str] = {}
        self.lock = threading.Lock()

    def unauthorized(self) -> tuple[int, Any]:
        return 401, _status(401, "Unauthorized", "Unauthorized")

    def kubeconfig(self, path) -> str:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: fake, cluster: {{server: 'http://127.0.0.1:{self.port}'}}}}]\n"
            f"users: [{{name: me, user: {{token: {TOKEN}}}}}]\n"
            "contexts: [{name: fake, context: {cluster: fake, user: me}}]\ncurrent-context: fake\n"
        )
        return str(path)

    def set_phase(self, ns: str, job: str, phase: str) -> None:
        with self.lock:
            obj = self.objects[("jobs", ns, job)]
            obj["status"] = {"state": {"phase": phase}, "running": 1 if phase == "Running" else 0}
            for (kind, pns, _), pod in self.objects.items():
                if (
                    kind == "pods"
                    and pns == ns
                    and pod["metadata"]["labels"].get("volcano.sh/job-name") == job
                ):
                    pod["status"]["phase"] = {"Completed": "Succeeded"}.get(phase, phase)

    # ------------------------------------------------------------------ the API
    def handle(self, method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
        routes = [
            (r"/apis/scheduling\.volcano\.sh/v1beta1/queues/(?P<name>[^/]+)", "queue"),
            (
                rf"/api/v1{NS}/(?P<kind>configmaps|secrets|pods)(/(?P<name>[^/]+))?(?P<log>/log)?",
                "core",
            ),
            (rf"/apis/batch\.volcano\.sh/v1alpha1{NS}/(?P<kind>jobs)(/(?P<name>[^/]+))?", "core"),
        ]
        for pattern, kind in routes:
            match = re.fullmatch(pattern, path)
            if match:
                args = match.groupdict()
                if kind == "queue":
                    state = self.queues.get(args["name"])
                    if state is None:
                        return 404, _status(404, f'queues "{args["name"]}" not found')
                    return 200, {"metadata": {"name": args["name"]}, "status": {"state": state}}
                return self._core(method, args, query, body)
        return 404, _status(404, f"no route {method} {path}")

    def _core(self, method: str, args: dict, query: dict, body: Any) -> tuple[int, Any]:
        kind, ns, name = args["kind"], args["ns"], args.get("name")
        with self.lock:
            if method == "POST":
                name = body["metadata"]["name"]
                if (kind, ns, name) in self.objects:
                    return 409, _status(409, f'{kind} "{name}" already exists', "AlreadyExists")
                body["metadata"]["namespace"] = ns
                self.objects[(kind, ns, name)] = body
                if kind == "jobs":
                    self._start_job(ns, body)
                return 201, body
            if method == "GET" and name and args.get("log"):
                if (kind, ns, name) not in self.objects:
                    return 404, _status(404, f'pods "{name}" not found')
                return 200, self.pod_logs.get(name, "")
            if method == "GET" and name:
                obj = self.objects.get((kind, ns, name))
                return (200, obj) if obj else (404, _status(404, f'{kind} "{name}" not found'))
            if method == "GET":
                selector = query.get("labelSelector", [""])[0]
                key, _, value = selector.partition("=")
                items = [
                    o for (k, n, _), o in sorted(self.objects.items())
                    if k == kind and n == ns and (not key or o["metadata"].get("labels", {}).get(key) == value)
                ]  # fmt: skip
                return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
            if method == "DELETE":
                if self.objects.pop((kind, ns, name), None) is None:
                    return 404, _status(404, f'{kind} "{name}" not found')
                if kind == "jobs":
                    for key in [k for k, o in self.objects.items() if k[0] == "pods" and
                                o["metadata"]["labels"].get("volcano.sh/job-name") == name]:  # fmt: skip
                        del self.objects[key]
                return 200, _status(200, "deleted", "Success")
        return 405, _status(405, "method not allowed")

    def _start_job(self, ns: str, job: dict) -> None:
        job["status"] = {"state": {"phase": "Pending"}}
        for task in job["spec"]["tasks"]:
            for index in range(task["replicas"]):
                pod = f"{job['metadata']['name']}-{task['name']}-{index}"
                self.objects[("pods", ns, pod)] = {
                    "metadata": {
                        "name": pod, "namespace": ns,
                        "labels": {"volcano.sh/job-name": job["metadata"]["name"], "volcano.sh/task-index": str(index)},
                    },
                    "spec": task["template"]["spec"],
                    "status": {"phase": "Pending"},
                }  # fmt: skip


def _status(code: int, message: str, reason: str = "NotFound") -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure" if code >= 400 else "Success",
            "message": message, "reason": reason, "code": code}  # fmt: skip
