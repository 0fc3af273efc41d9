"""The ``volcano`` backend: a ``batch.volcano.sh/v1alpha1`` Job through the kubernetes client.

One Job per run (``theseus-<run>``) with one task of ``nodes`` replicas, gang-scheduled
(``minAvailable``), with the ``svc`` plugin (stable host names: process 0 is the
coordinator) and the ``env`` plugin (``VC_TASK_INDEX`` becomes the process id). The bundle
and launch files travel in ConfigMaps, secrets in a Secret mounted 0400; the shared root
is a PersistentVolumeClaim mounted at ``mount_path``.

A ConfigMap holds at most 1 MiB, and the bundle grows with the workspace (921 KiB of 976
when this was written). So the launch files go in one ConfigMap (``<job>-launch``) and the
bundle is cut into parts of :data:`PART_BYTES` (``<job>-bundle-0``, ``-1``...), all labelled
``theseus.run=<run>`` and projected into one folder; the pod joins the parts in order
(``cat bundle.tar.gz.part-*``). Cancelling deletes every ConfigMap with the run's label.
"""

from __future__ import annotations

import base64
from typing import Any, TextIO

from theseus.core.requirements import require
from theseus.dispatch.bootstrap import Paths, Submission, plan_text, script, secrets_file
from theseus.dispatch.bundle import Bundle
from theseus.dispatch.remote import DispatchError, q
from theseus.dispatch.targets.base import (
    CANCELLED,
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    UNKNOWN,
    Backend,
    Request,
    Status,
)

GROUP, VERSION, PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
PART_BYTES = 900 * 1024  # of the bundle per ConfigMap (1 MiB each at most; base64 in transit)
MAX_BUNDLE = 64 * 1024 * 1024  # more is a workspace that should exclude large files
PHASES = {
    "Pending": PENDING, "Running": RUNNING, "Restarting": RUNNING, "Completing": RUNNING,
    "Completed": FINISHED, "Failed": FAILED, "Aborted": CANCELLED, "Aborting": CANCELLED,
    "Terminated": CANCELLED, "Terminating": CANCELLED,
}  # fmt: skip
WORK = "/theseus-work"


def job_name(run: str) -> str:
    return f"theseus-{run.lower().replace('_', '-').replace('.', '-').replace('+', '-').replace('@', '-')}"[
        :63
    ]


class VolcanoBackend(Backend):
    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        self._api: Any = None

    # ------------------------------------------------------------------ client
    def api(self) -> Any:
        if self._api is None:
            require("kubernetes", "reaching Kubernetes", error=DispatchError)
            from kubernetes import client, config

            try:
                api_client = config.new_client_from_config(
                    config_file=self.config.kubeconfig, context=self.config.context
                )
            except Exception as error:  # missing file, bad context: one line
                raise DispatchError(f"target {self.name!r}: kubeconfig: {error}") from error
            api_client.configuration.retries = 0
            self._api = (client.CoreV1Api(api_client), client.CustomObjectsApi(api_client))
        return self._api

    def call(self, what: str, fn: Any, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", self.config.timeout)
        try:
            return fn(*args, **kwargs)
        except ApiException as error:
            if missing_ok and error.status == 404:
                return None
            reason = error.reason
            try:
                import json

                reason = json.loads(error.body or "").get("message") or reason
            except (TypeError, ValueError):
                pass
            raise DispatchError(f"{self.name}: {what}: {error.status} {reason}") from error
        except (HTTPError, OSError) as error:
            raise DispatchError(
                f"{self.name}: {what}: cannot reach the API server ({error})"
            ) from error

    # ------------------------------------------------------------------ solving
    def available(self, request: Request, nodes: int) -> str | None:
        try:
            _, custom = self.api()
            queue = self.call(
                f"get queue {self.config.queue}",
                custom.get_cluster_custom_object,
                "scheduling.volcano.sh", "v1beta1", "queues", self.config.queue,
                missing_ok=True,
            )  # fmt: skip
        except DispatchError as error:
            return str(error)
        if queue is None:
            return f"queue {self.config.queue!r} does not exist"
        state = (queue.get("status") or {}).get("state", "Open")
        if state != "Open":
            return f"queue {self.config.queue!r} is {state}"
        return None

    # ------------------------------------------------------------------ manifests
    def _root(self) -> str:
        return self.config.root

    def manifest(
        self, sub: Submission, bundle_sha: str, has_secrets: bool, parts: int = 1
    ) -> dict[str, Any]:
        c = self.config
        name = job_name(sub.name)
        launch = f"{WORK}/launches/{sub.name}"
        bundle_dir = f"{WORK}/bundles/{bundle_sha[:16]}"
        coordinator = f"{name}-worker-0.{name}:{c.coordinator_port}"
        start = " && ".join(
            [
                f"mkdir -p {q(bundle_dir)} {q(launch)}",
                f"cat /theseus-bundle/bundle.tar.gz.part-* | tar -xz -C {q(bundle_dir)}",
                f"cp /theseus-bundle/bootstrap.sh /theseus-bundle/config.yaml "
                f"/theseus-bundle/submission.json {q(launch)}/",
                *(
                    [f"install -m 600 /theseus-secrets/secrets.env {q(launch)}/secrets.env"]
                    if has_secrets
                    else []
                ),
                'export THESEUS_PROCESS_ID="${VC_TASK_INDEX:-0}"',
                f"export THESEUS_NUM_PROCESSES={sub.nodes}",
                f"export THESEUS_COORDINATOR_ADDRESS={q(coordinator)}",
                f"exec bash {q(launch)}/bootstrap.sh",
            ]
        )
        resources: dict[str, Any] = {}
        if c.chip != "cpu":
            resources["limits"] = {c.resource: str(c.chips_per_node)}
        requests = {k: v for k, v in (("cpu", c.cpu), ("memory", c.memory)) if v}
        if requests:
            resources["requests"] = requests
        mounts = [
            {"name": "bundle", "mountPath": "/theseus-bundle", "readOnly": True},
            {"name": "work", "mountPath": WORK},
        ]
        sources = [{"configMap": {"name": f"{name}-launch"}}]
        sources += [{"configMap": {"name": f"{name}-bundle-{i}"}} for i in range(parts)]
        volumes: list[dict[str, Any]] = [
            {"name": "bundle", "projected": {"sources": sources, "defaultMode": 0o755}},
            {"name": "work", "emptyDir": {}},
        ]
        if has_secrets:
            mounts.append({"name": "secrets", "mountPath": "/theseus-secrets", "readOnly": True})
            volumes.append(
                {
                    "name": "secrets",
                    "secret": {"secretName": f"{name}-secrets", "defaultMode": 0o400},
                }
            )
        if c.pvc:
            mounts.append({"name": "root", "mountPath": c.mount_path})
            volumes.append({"name": "root", "persistentVolumeClaim": {"claimName": c.pvc}})
        container = {
            "name": "theseus",
            "image": c.image,
            "command": ["bash", "-c", start],
            "resources": resources,
            "volumeMounts": mounts,
            "ports": [{"containerPort": c.coordinator_port, "name": "coordinator"}],
        }
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": c.namespace,
                "labels": {"theseus.run": sub.name},
            },
            "spec": {
                "schedulerName": "volcano",
                "queue": c.queue,
                "minAvailable": sub.nodes,
                "maxRetry": 3,
                "plugins": {"svc": [], "env": []},
                "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
                "tasks": [
                    {
                        "name": "worker",
                        "replicas": sub.nodes,
                        "template": {
                            "metadata": {"labels": {"theseus.run": sub.name}},
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [container],
                                "volumes": volumes,
                            },
                        },
                    }
                ],
            },
        }

    def _bootstrap(self, sub: Submission, bundle_sha: str) -> str:
        """Each pod's bootstrap; it checks that the PVC's mount point is mounted (the root is
        under it: the config refuses one that is not) before it starts."""
        paths = Paths.under(WORK, self._root(), sub.name, bundle_sha[:16])
        return script(
            sub, self.config, paths, mount=self.config.root_mount or self.config.mount_path
        )

    def plan(self, sub: Submission) -> str:
        import yaml

        header = plan_text(
            [("target", f"{self.name} (volcano)"), ("namespace", self.config.namespace)]
        )
        body = yaml.safe_dump(
            self.manifest(sub, "<sha>" * 4, bool(self.config.secrets)), sort_keys=False
        )
        return f"{header}\n--- Job\n{body}--- bootstrap.sh\n{self._bootstrap(sub, '<sha>' * 4)}"

    # ------------------------------------------------------------------ lifecycle
    def launch(self, sub: Submission, bundle: Bundle, secrets: dict[str, str]) -> dict[str, Any]:
        import json

        core, custom = self.api()
        ns, name = self.config.namespace, job_name(sub.name)
        if len(bundle.data) > MAX_BUNDLE:
            raise DispatchError(
                f"{self.name}: the bundle is {len(bundle.data) // 1024} KiB, more than the "
                f"{MAX_BUNDLE // 1024} KiB sent through ConfigMaps (exclude large files from "
                "the workspace)"
            )
        labels = {"theseus.run": sub.name}
        pieces = [
            bundle.data[start : start + PART_BYTES]
            for start in range(0, max(len(bundle.data), 1), PART_BYTES)
        ]
        configmaps: list[dict[str, Any]] = [
            {
                "metadata": {"name": f"{name}-launch", "labels": labels},
                "data": {
                    "bootstrap.sh": self._bootstrap(sub, bundle.sha),
                    "config.yaml": sub.config_yaml,
                    "submission.json": json.dumps(sub.record(), indent=2),
                },
            }
        ] + [
            {
                "metadata": {"name": f"{name}-bundle-{index}", "labels": labels},
                "binaryData": {f"bundle.tar.gz.part-{index:04d}": base64.b64encode(piece).decode()},
            }
            for index, piece in enumerate(pieces)
        ]
        created: list[tuple[str, str, Any]] = []
        try:
            for configmap in configmaps:
                self.call("create ConfigMap", core.create_namespaced_config_map, ns, configmap)
                created.append(
                    ("configmap", configmap["metadata"]["name"], core.delete_namespaced_config_map)
                )
            if secrets:
                secret = {
                    "metadata": {"name": f"{name}-secrets", "labels": {"theseus.run": sub.name}},
                    "type": "Opaque",
                    "data": {"secrets.env": base64.b64encode(secrets_file(secrets)).decode()},
                }
                self.call("create Secret", core.create_namespaced_secret, ns, secret)
                created.append(("secret", f"{name}-secrets", core.delete_namespaced_secret))
            body = self.manifest(sub, bundle.sha, bool(secrets), len(pieces))
            self.call(
                "create Job",
                custom.create_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                PLURAL,
                body,
            )
        except BaseException:
            for kind, object_name, delete in created:
                self.call(f"delete {kind}", delete, object_name, ns, missing_ok=True)
            raise
        return {"job": name, "namespace": ns, "nodes": sub.nodes, "run": sub.name}

    def find(self, sub: Submission) -> dict[str, Any] | None:
        handle = {
            "job": job_name(sub.name),
            "namespace": self.config.namespace,
            "nodes": sub.nodes,
            "run": sub.name,
        }
        state = self.status(handle).state
        return None if state in (UNKNOWN, FAILED, CANCELLED) else handle

    def status(self, handle: dict[str, Any]) -> Status:
        _, custom = self.api()
        job = self.call(
            "get Job", custom.get_namespaced_custom_object, GROUP, VERSION, handle["namespace"], PLURAL,
            handle["job"], missing_ok=True,
        )  # fmt: skip
        if job is None:
            return Status(UNKNOWN, f"no Job {handle['job']}")
        status = job.get("status") or {}
        phase = (status.get("state") or {}).get("phase", "Pending")
        counts = ", ".join(
            f"{k} {status[k]}"
            for k in ("pending", "running", "succeeded", "failed")
            if status.get(k)
        )
        return Status(
            PHASES.get(phase, UNKNOWN),
            f"Job {handle['job']} {phase}" + (f" ({counts})" if counts else ""),
        )

    def _pods(self, handle: dict[str, Any]) -> list[Any]:
        core, _ = self.api()
        pods = self.call(
            "list pods", core.list_namespaced_pod, handle["namespace"],
            label_selector=f"volcano.sh/job-name={handle['job']}",
        )  # fmt: skip
        return sorted(pods.items, key=lambda p: p.metadata.name)

    def logs(self, handle: dict[str, Any], follow: bool, out: TextIO) -> None:
        core, _ = self.api()
        pods = self._pods(handle)
        if not pods:
            raise DispatchError(f"{self.name}: Job {handle['job']} has no pods yet")
        pod = pods[0].metadata.name
        if not follow:
            out.write(self.call("read log", core.read_namespaced_pod_log, pod, handle["namespace"]))
            return
        stream = self.call(
            "follow log", core.read_namespaced_pod_log, pod, handle["namespace"], follow=True,
            _preload_content=False, _request_timeout=None,
        )  # fmt: skip
        for chunk in stream.stream(1024):
            out.write(chunk.decode(errors="replace"))
            out.flush()

    def cancel(self, handle: dict[str, Any]) -> str:
        core, custom = self.api()
        ns, name = handle["namespace"], handle["job"]
        self.call(
            "delete Job", custom.delete_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name,
            propagation_policy="Background", missing_ok=True,
        )  # fmt: skip
        run = handle.get("run")
        names = {f"{name}-bundle", f"{name}-launch"}  # the one-ConfigMap layout of before too
        if run:
            listed = self.call(
                "list ConfigMaps", core.list_namespaced_config_map, ns,
                label_selector=f"theseus.run={run}",
            )  # fmt: skip
            names |= {item.metadata.name for item in listed.items}
        for configmap in sorted(names):
            self.call(
                "delete ConfigMap", core.delete_namespaced_config_map, configmap, ns,
                missing_ok=True,
            )  # fmt: skip
        self.call(
            "delete Secret", core.delete_namespaced_secret, f"{name}-secrets", ns, missing_ok=True
        )
        return f"deleted Job {ns}/{name}"
