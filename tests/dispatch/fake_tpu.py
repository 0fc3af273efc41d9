"""A small TPU v2 API server on loopback (create, get, list, delete nodes; operations).

Created nodes are READY at once, with one network endpoint per worker pointing at a
loopback sshd, so the backend's SSH launch on the "workers" is real.
"""

from __future__ import annotations

import re
from typing import Any

from fake_http import FakeHTTP

TOKEN = "fake-gcp-token"
LOCATION = r"/v2/projects/(?P<project>[^/]+)/locations/(?P<zone>[^/]+)"
ACCELERATORS = {"v5litepod-8": 1, "v4-16": 2}  # type -> workers


class FakeTPU(FakeHTTP):
    token = TOKEN

    def __init__(self, worker_hosts: list[str]) -> None:
        super().__init__()
        self.worker_hosts = worker_hosts
        self.nodes: dict[str, dict[str, Any]] = {}
        self.operations: dict[str, dict[str, Any]] = {}
        self.fail_create: str | None = None

    def unauthorized(self) -> tuple[int, Any]:
        return 401, _error(
            401, "Request had invalid authentication credentials.", "UNAUTHENTICATED"
        )

    def _operation(self, parent: str, response: dict | None) -> dict:
        name = f"{parent}/operations/op-{len(self.operations) + 1}"
        op = {
            "name": name,
            "done": True,
            "metadata": {"@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"},
        }
        if response is not None:
            op["response"] = {"@type": "type.googleapis.com/google.cloud.tpu.v2.Node", **response}
        else:
            op["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
        self.operations[name] = op
        return op

    def handle(self, method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
        match = re.fullmatch(LOCATION + r"/(?P<rest>.*)", path)
        if not match:
            return 404, _error(404, f"no route {path}")
        parent = f"projects/{match['project']}/locations/{match['zone']}"
        rest = match["rest"]
        if rest.startswith("operations/"):
            op = self.operations.get(f"{parent}/{rest}")
            return (200, op) if op else (404, _error(404, "operation not found"))
        if rest.startswith("acceleratorTypes/"):
            kind = rest.split("/", 1)[1]
            if kind not in ACCELERATORS:
                return 404, _error(404, f"accelerator type {kind} not found in {match['zone']}")
            return 200, {"name": f"{parent}/{rest}", "type": kind}
        if rest == "nodes" and method == "POST":
            node_id = query.get("nodeId", [""])[0]
            if self.fail_create:
                return 429, _error(429, self.fail_create, "RESOURCE_EXHAUSTED")
            if node_id in self.nodes:
                return 409, _error(409, f"node {node_id} already exists", "ALREADY_EXISTS")
            workers = ACCELERATORS.get(body.get("acceleratorType", ""))
            if workers is None:
                return 400, _error(
                    400,
                    f"unknown accelerator type {body.get('acceleratorType')}",
                    "INVALID_ARGUMENT",
                )
            host = lambda i: self.worker_hosts[i % len(self.worker_hosts)]  # noqa: E731
            node = {
                **body,
                "name": f"{parent}/nodes/{node_id}",
                "state": "READY",
                "networkEndpoints": [{"ipAddress": host(i), "port": 8470} for i in range(workers)],
            }
            self.nodes[node_id] = node
            return 200, self._operation(parent, node)
        if rest == "nodes" and method == "GET":
            return 200, {"nodes": list(self.nodes.values())}
        node_match = re.fullmatch(r"nodes/(?P<id>[^/:]+)", rest)
        if node_match:
            node = self.nodes.get(node_match["id"])
            if node is None:
                return 404, _error(404, f"node {node_match['id']} not found")
            if method == "GET":
                return 200, node
            if method == "DELETE":
                del self.nodes[node_match["id"]]
                return 200, self._operation(parent, None)
        return 404, _error(404, f"no route {method} {path}")


def _error(code: int, message: str, status: str = "NOT_FOUND") -> dict:
    return {"error": {"code": code, "message": message, "status": status}}
