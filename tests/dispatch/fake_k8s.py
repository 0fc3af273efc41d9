"""A small Kubernetes API server on loopback: the calls the volcano backend makes, no more.

It stores ConfigMaps, Secrets and Volcano Jobs, plays the Volcano controller just enough
(a created Job gets one Pending pod per replica; the test moves phases along), answers pod
lists by label and pod logs, and records every request with its bearer token.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

TOKEN = "fake-k8s-token"
NS = r"/namespaces/(?P<ns>[^/]+)"


class FakeKubernetes:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, ns, name)
        self.queues: dict[str, str] = {"default": "Open"}
        self.pod_logs: dict[str, str] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeKubernetes:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

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


class _Handler(BaseHTTPRequestHandler):
    fake: FakeKubernetes

    def log_message(self, *args: Any) -> None:
        pass

    def _serve(self, method: str) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        auth = self.headers.get("Authorization")
        self.fake.requests.append((method, url.path, auth))
        if auth != f"Bearer {TOKEN}":
            code, payload = 401, _status(401, "Unauthorized", "Unauthorized")
        else:
            code, payload = self.fake.handle(method, url.path, parse_qs(url.query), body)
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header(
            "Content-Type", "text/plain" if isinstance(payload, str) else "application/json"
        )
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")
