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


def joined_bundle(k8s, ns: str, job: str, pod: dict) -> bytes:
    """The bundle as the pod sees it: the projected ConfigMaps' parts joined in name order
    (``cat bundle.tar.gz.part-*``), each ConfigMap within the 1 MiB a ConfigMap holds."""
    sources = next(v for v in pod["volumes"] if v["name"] == "bundle")["projected"]["sources"]
    files: dict[str, bytes] = {}
    for source in sources:
        configmap = k8s.objects[("configmaps", ns, source["configMap"]["name"])]
        size = sum(len(base64.b64decode(v)) for v in configmap.get("binaryData", {}).values())
        size += sum(len(v.encode()) for v in configmap.get("data", {}).values())
        assert size <= 1024 * 1024, source
        for key, value in configmap.get("binaryData", {}).items():
            files[key] = base64.b64decode(value)
    assert all(key.startswith("bundle.tar.gz.part-") for key in files)
    return b"".join(files[key] for key in sorted(files))


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

    configmap = k8s.objects[("configmaps", "ml", "theseus-vk-run-launch")]
    bootstrap = configmap["data"]["bootstrap.sh"]
    assert "GROUP=cuda12" in bootstrap and "--root /shared/theseus --name vk-run" in bootstrap
    assert "MOUNT=/shared\n" in bootstrap  # each pod checks the PVC is mounted
    subprocess.run(["bash", "-n"], input=bootstrap, text=True, check=True)
    archive = joined_bundle(k8s, "ml", "theseus-vk-run", pod)
    names = tarfile.open(fileobj=io.BytesIO(archive)).getnames()
    assert (
        "uv.lock" in names
        and "packages/theseus-dispatch/src/theseus/dispatch/targets/volcano.py" in names
    )
    assert not any(n.startswith((".venv/", "runs/")) for n in names)
    secret = k8s.objects[("secrets", "ml", "theseus-vk-run-secrets")]
    assert SECRET in base64.b64decode(secret["data"]["secrets.env"]).decode()
    assert SECRET.encode() not in archive and SECRET not in str(k8s.objects)
    assert SECRET not in str(job)
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
    assert not [k for k in k8s.objects if k[0] == "configmaps" and "theseus-stale" in k[2]]
    assert not cli.state.exists()


def test_a_bundle_above_one_mebibyte_travels_in_several_configmaps(k8s, tmp_path):
    """Before (issue 24): the bundle travelled in one ConfigMap (976 KiB at most) and was at
    921 KiB; the next dependency would have broken Kubernetes dispatch. A 1.5 MiB bundle of
    incompressible bytes goes through the real kubernetes client in two parts, and the pod
    joins them into the same archive."""
    import os

    from theseus.dispatch.bootstrap import Submission
    from theseus.dispatch.bundle import make_bundle
    from theseus.dispatch.config import BUILTIN_SCHEMAS, build_target
    from theseus.dispatch.targets.volcano import PART_BYTES, VolcanoBackend

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    for name in ("pyproject.toml", "uv.lock"):
        (workspace / name).write_text(f"# {name}\n")
    big = os.urandom(1536 * 1024)
    (workspace / "big.bin").write_bytes(big)
    bundle = make_bundle(workspace)
    assert len(bundle.data) > 1024 * 1024
    target = volcano_target(k8s, tmp_path, secrets=[], nodes=1, chips_per_node=1)
    backend = VolcanoBackend("vk", build_target("vk", target, BUILTIN_SCHEMAS, "test"))
    sub = Submission(job=JOB, overrides=[], name="big", target="vk", config_yaml="a: 1\n")
    handle = backend.launch(sub, bundle, {})
    pod = k8s.objects[("jobs", "ml", "theseus-big")]["spec"]["tasks"][0]["template"]["spec"]
    parts = [k for k in k8s.objects if k[0] == "configmaps" and k[2].startswith("theseus-big-b")]
    assert len(parts) == -(-len(bundle.data) // PART_BYTES) == 2
    archive = joined_bundle(k8s, "ml", "theseus-big", pod)
    assert archive == bundle.data
    member = tarfile.open(fileobj=io.BytesIO(archive)).extractfile("big.bin")
    assert member is not None and member.read() == big
    command = pod["containers"][0]["command"][2]
    assert "cat /theseus-bundle/bundle.tar.gz.part-* | tar -xz -C" in command
    backend.cancel(handle)
    assert not [k for k in k8s.objects if "theseus-big" in k[2]]


def test_without_the_kubernetes_client_the_error_names_the_extra(k8s, cli, tmp_path):
    """kubernetes is the volcano extra's (theseus-dispatch[volcano]), not a dependency:
    made unimportable, a volcano submit is one line naming the extra, and nothing is sent."""
    from dispatch_helpers import REPO, VENV_PYTHON

    cli.write({"vk": volcano_target(k8s, tmp_path)})
    cli.env["WANDB_API_KEY"] = SECRET
    hide = "import sys; sys.modules['kubernetes'] = None; from theseus.cli.main import main; main()"
    args = ["submit", JOB, "--to", "vk", "--chips", "16", "--name", "no-client"]
    done = subprocess.run(
        [VENV_PYTHON, "-c", hide, *args],
        env=cli.env, cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: target vk (volcano): reaching Kubernetes needs the kubernetes package: "
        "pip install 'theseus-dispatch[volcano]'"
    ]
    assert k8s.requests == []
