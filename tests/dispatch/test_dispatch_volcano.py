"""The volcano backend: the real kubernetes client against a local fake API server."""

from __future__ import annotations

import base64
import io
import subprocess
import tarfile
import uuid

import pytest
from fake_k8s import TOKEN, FakeKubernetes

JOB = "core/info"
OVERRIDES: list[str] = []
SECRET = "vk-" + uuid.uuid4().hex


@pytest.fixture
def k8s():
    server = FakeKubernetes().start()
    yield server
    server.stop()


def volcano_target(k8s, tmp, **extra) -> dict:
    target = {
        "type": "volcano",
        "kubeconfig": k8s.kubeconfig(tmp / "kubeconfig"),
        "namespace": "ml",
        "queue": "default",
        "image": "python:3.11-slim",
        "pvc": "theseus-root",
        "mount_path": "/shared",
        "root": "/shared/theseus",
        "group": "cuda12",
        "chip": "h100",
        "chips_per_node": 8,
        "nodes": 4,
        "cpu": "16",
        "memory": "64Gi",
        "secrets": ["WANDB_API_KEY"],
        "coordinator_port": 47123,
    }
    target.update(extra)
    return target


def test_job_manifest_and_lifecycle(k8s, cli, tmp_path):
    cli.write({"vk": volcano_target(k8s, tmp_path)})
    cli.env["WANDB_API_KEY"] = SECRET
    done = cli("submit", JOB, *OVERRIDES, "--to", "vk", "--chips", "16", "--name", "vk-run")
    assert "to vk [volcano] on 2 node(s)" in done.stdout

    job = k8s.objects[("jobs", "ml", "theseus-vk-run")]
    spec = job["spec"]
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["kind"] == "Job"
    assert (
        spec["minAvailable"] == 2
        and spec["queue"] == "default"
        and spec["schedulerName"] == "volcano"
    )
    assert spec["plugins"] == {"svc": [], "env": []}
    task = spec["tasks"][0]
    assert task["replicas"] == 2
    pod = task["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "python:3.11-slim"
    assert container["resources"] == {
        "limits": {"nvidia.com/gpu": "8"},
        "requests": {"cpu": "16", "memory": "64Gi"},
    }
    command = container["command"][2]
    assert "THESEUS_COORDINATOR_ADDRESS=theseus-vk-run-worker-0.theseus-vk-run:47123" in command
    assert (
        'THESEUS_PROCESS_ID="${VC_TASK_INDEX:-0}"' in command
        and "THESEUS_NUM_PROCESSES=2" in command
    )
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["root"]["persistentVolumeClaim"] == {"claimName": "theseus-root"}
    assert volumes["secrets"]["secret"] == {
        "secretName": "theseus-vk-run-secrets",
        "defaultMode": 0o400,
    }
    assert {"name": "root", "mountPath": "/shared"} in container["volumeMounts"]

    configmap = k8s.objects[("configmaps", "ml", "theseus-vk-run-bundle")]
    bootstrap = configmap["data"]["bootstrap.sh"]
    assert "--group cuda12" in bootstrap and "--root /shared/theseus --name vk-run" in bootstrap
    subprocess.run(["bash", "-n"], input=bootstrap, text=True, check=True)
    archive = base64.b64decode(configmap["binaryData"]["bundle.tar.gz"])
    names = tarfile.open(fileobj=io.BytesIO(archive)).getnames()
    assert (
        "uv.lock" in names
        and "packages/theseus-dispatch/src/theseus/dispatch/targets/volcano.py" in names
    )
    assert not any(n.startswith((".venv/", "runs/")) for n in names)
    secret = k8s.objects[("secrets", "ml", "theseus-vk-run-secrets")]
    assert SECRET in base64.b64decode(secret["data"]["secrets.env"]).decode()
    assert (
        SECRET.encode() not in archive and SECRET not in str(configmap) and SECRET not in str(job)
    )
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in k8s.requests)

    assert "vk-run  vk  core/info  pending" in cli("status", "vk-run").stdout
    k8s.set_phase("ml", "theseus-vk-run", "Running")
    k8s.pod_logs["theseus-vk-run-worker-0"] = "theseus: process 0 of 2\nstep 1 loss 4.2\n"
    assert "running [Job theseus-vk-run Running (running 1)]" in cli("status", "vk-run").stdout
    posts = sum(1 for m, p, _ in k8s.requests if m == "POST" and p.endswith("/jobs"))
    again = cli("submit", JOB, *OVERRIDES, "--to", "vk", "--chips", "16", "--name", "vk-run")
    assert "already running" in again.stdout
    assert sum(1 for m, p, _ in k8s.requests if m == "POST" and p.endswith("/jobs")) == posts
    assert cli("logs", "vk-run").stdout == "theseus: process 0 of 2\nstep 1 loss 4.2\n"
    assert "step 1 loss 4.2" in cli("logs", "vk-run", "-f").stdout
    k8s.set_phase("ml", "theseus-vk-run", "Completed")
    assert "vk-run  vk  core/info  finished" in cli("status", "vk-run").stdout

    assert "deleted Job ml/theseus-vk-run" in cli("cancel", "vk-run").stdout
    assert not [k for k in k8s.objects if "theseus-vk-run" in k[2]]


def test_closed_queue_and_rollback(k8s, cli, tmp_path):
    cli.write({"vk": volcano_target(k8s, tmp_path, secrets=[])})
    k8s.queues["default"] = "Closed"
    done = cli("submit", JOB, "--to", "vk", "--name", "closed", check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: target vk (volcano): queue 'default' is Closed"
    k8s.queues["default"] = "Open"

    # a failed leftover Job of the same name: creating the new one fails -> nothing left behind
    k8s.objects[("jobs", "ml", "theseus-stale")] = {
        "metadata": {"name": "theseus-stale"},
        "spec": {"tasks": []},
        "status": {"state": {"phase": "Failed"}},
    }
    done = cli("submit", JOB, "--to", "vk", "--name", "stale", check=False)
    assert done.returncode == 2
    assert 'create Job: 409 jobs "theseus-stale" already exists' in done.stderr
    assert ("configmaps", "ml", "theseus-stale-bundle") not in k8s.objects
    assert not cli.state.exists()
