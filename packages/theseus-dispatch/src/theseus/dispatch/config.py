"""The dispatch config file: named targets, validated strictly.

``~/.config/theseus/dispatch.yaml`` (or ``--dispatch-config PATH``)::

    priority: [lab-box, cluster]        # order ``--to auto`` tries (default: file order)
    targets:
      lab-box:
        type: ssh
        hosts: [gpu1.lab, gpu2.lab]
        user: me
        chip: h100
        chips_per_node: 8
        root: /data/theseus
        workdir: ~/theseus-work
        group: cuda12
        env: {XLA_FLAGS: "--xla_gpu_enable_latency_hiding_scheduler=true"}
        secrets: [WANDB_API_KEY]        # names of local environment variables, sent 0600

Every key is typed; an unknown key, a wrong type or a missing required key is an error
naming the target and the key.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from dataclasses import dataclass, field
from difflib import get_close_matches
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import yaml
from theseus.core import safe_yaml
from theseus.core.errors import ConfigError
from theseus.core.ranges import Range, range_of
from theseus.dispatch.user_paths import user_path
from theseus.dispatch.value_shapes import SHAPES, shape_problem

CONFIG_ENV = "THESEUS_DISPATCH_CONFIG"
GROUPS = ("cpu", "cuda12", "cuda13", "tpu")


def _opt(
    default: Any = dataclasses.MISSING,
    help: str = "",
    factory: Any = None,
    shape: str | None = None,
    key_shape: str | None = None,
    **bounds: float,
) -> Any:
    """A target key: its default, a one-line help, for a number its valid range
    (``ge``/``gt``/``le``/``lt``, as ``option(...)`` of the job configs), and for a string
    that names something its ``shape`` (:mod:`theseus.dispatch.value_shapes`; of each item
    of a list, and ``key_shape`` of each key of a mapping)."""
    for named in (shape, key_shape):
        if named is not None and named not in SHAPES:
            raise ValueError(f"unknown value shape {named!r}; known: {', '.join(SHAPES)}")
    metadata: dict[str, Any] = {"help": help, "shape": shape, "key_shape": key_shape}
    if bounds:
        metadata["range"] = Range(**bounds)
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(kw_only=True)
class TargetConfig:
    """Keys every target has."""

    type: str = _opt(help="backend: ssh, slurm, volcano, gcp-tpu (or one a plugin registers)")
    root: str = _opt(help="theseus root directory on the target (runs land in <root>/runs)")
    workdir: str = _opt("~/theseus-work", "where bundles, venvs and launch logs live")
    group: str = _opt("cpu", "uv dependency group to install: cpu, cuda12, cuda13, tpu")
    chip: str = _opt("cpu", "accelerator type per node (cpu, h100, a100, v5e ...)", shape="name")
    chips_per_node: int = _opt(1, "accelerators per node (CPU hosts: 1)", ge=1)
    nodes: int = _opt(1, "nodes the target can give one run", ge=1)
    env: dict[str, str] = _opt(
        help="extra environment for the job", factory=dict, key_shape="env_name"
    )
    secrets: list[str] = _opt(
        help="names of local environment variables sent to the job (never logged; 0600)",
        factory=list,
        shape="env_name",
    )
    python: str | None = _opt(
        None, "reuse this Python (its environment must have theseus) instead of uv sync"
    )
    uv: str = _opt("uv", "uv executable on the target; installed into the workdir if missing")
    coordinator_port: int = _opt(
        47123, "port of the jax.distributed coordinator (multi-host)", ge=1, le=65535
    )
    timeout: float = _opt(20.0, "seconds allowed for one remote operation", gt=0)
    root_mount: str | None = _opt(
        None,
        "the mount point of the shared file system the root is on: each host checks it is "
        "mounted before starting, and exits 93 naming it when it is not",
    )


@dataclass(kw_only=True)
class SSHConfig:
    """How to reach a host over SSH (ssh targets, SLURM login nodes, TPU workers)."""

    user: str | None = _opt(None, "login user (default: the local user)", shape="user")
    port: int = _opt(22, "SSH port", ge=1, le=65535)
    key_file: str | None = _opt(None, "private key; default: the agent and ~/.ssh keys")
    known_hosts: str = _opt("~/.ssh/known_hosts", "host keys are verified against this file")
    insecure_skip_host_key_check: bool = _opt(False, "accept unknown host keys (NOT for prod)")
    connect_timeout: float = _opt(10.0, "seconds to connect and authenticate", gt=0)


@dataclass(kw_only=True)
class SSHTargetConfig(TargetConfig, SSHConfig):
    hosts: list[str] = _opt(
        help="hosts ([user@]host[:port]), one node each", factory=list, shape="host"
    )


@dataclass(kw_only=True)
class SlurmTargetConfig(TargetConfig, SSHConfig):
    login: str | None = _opt(
        None, "login node to submit from over SSH; none: local sbatch", shape="host"
    )
    slurm_conf: str | None = _opt(None, "SLURM_CONF for the SLURM commands (where not default)")
    partition: str | None = _opt(None, "partition (-p)")
    account: str | None = _opt(None, "account (-A)")
    qos: str | None = _opt(None, "quality of service (--qos)")
    time: str | None = _opt(None, "time limit (-t), e.g. 04:00:00")
    mem: str | None = _opt(None, "memory per node (--mem), e.g. 64G")
    cpus_per_task: int | None = _opt(None, "CPUs per task (-c)", ge=1)
    gres: str | None = _opt(None, "GRES name for chips (default gpu); chips become gpu:N")
    sbatch_args: list[str] = _opt(help="extra sbatch options", factory=list)


@dataclass(kw_only=True)
class VolcanoTargetConfig(TargetConfig):
    namespace: str = _opt("default", "Kubernetes namespace", shape="name")
    queue: str = _opt("default", "Volcano queue", shape="name")
    image: str = _opt(
        help="container image with Python 3.11 (and uv, or internet access)", shape="image"
    )
    pvc: str | None = _opt(
        None, "PersistentVolumeClaim holding the shared root (required)", shape="name"
    )
    mount_path: str = _opt("/theseus", "where the PVC is mounted in the pods; root is under it")
    kubeconfig: str | None = _opt(None, "kubeconfig file (default: ~/.kube/config)")
    context: str | None = _opt(None, "kubeconfig context")
    resource: str = _opt("nvidia.com/gpu", "resource name of one chip", shape="resource")
    cpu: str | None = _opt(None, "CPU request per pod", shape="quantity")
    memory: str | None = _opt(None, "memory request per pod", shape="quantity")

    def problem(self) -> str | None:
        """The shared root must be on the volume: a root elsewhere is the pod's own disk,
        lost with the pod (and unseen by the other pods of the run)."""
        mount = PurePosixPath(self.mount_path)
        if not mount.is_absolute():
            return f"key 'mount_path' must be an absolute path, got {self.mount_path!r}"
        if self.pvc is None:
            return (
                "key 'pvc' is not set: the root would be on each pod's own disk, lost when the "
                "pod ends; name the PersistentVolumeClaim that holds the shared root"
            )
        if not PurePosixPath(self.root).is_relative_to(mount):
            return (
                f"key 'root' {self.root!r} is not under mount_path {self.mount_path!r}, where "
                f"the PVC {self.pvc!r} is mounted: the run would be written to the pod's own "
                f"disk; set root to a folder under {self.mount_path}"
            )
        return None


@dataclass(kw_only=True)
class GcpTpuTargetConfig(TargetConfig, SSHConfig):
    #: one slice: a launch starts every worker of the VM, so a run takes all ``nodes``
    whole_slice: ClassVar[bool] = True

    project: str = _opt(help="GCP project", shape="name")
    zone: str = _opt(help="zone, e.g. us-central2-b", shape="name")
    accelerator_type: str = _opt(help="TPU accelerator type, e.g. v5litepod-8", shape="name")
    runtime_version: str = _opt("tpu-ubuntu2204-base", "TPU VM runtime version", shape="name")
    spot: bool = _opt(False, "create a spot VM")
    delete_when_done: bool = _opt(False, "delete the VM when `theseus cancel` or the run ends")
    api_endpoint: str | None = _opt(None, "TPU API endpoint override (tests, private endpoints)")
    use_gcloud: bool = _opt(True, "use the gcloud CLI when installed, else the REST API")
    access_token_env: str = _opt(
        "CLOUDSDK_AUTH_ACCESS_TOKEN",
        "environment variable with an access token (REST only)",
        shape="env_name",
    )


BUILTIN_SCHEMAS: dict[str, type] = {
    "ssh": SSHTargetConfig,
    "slurm": SlurmTargetConfig,
    "volcano": VolcanoTargetConfig,
    "gcp-tpu": GcpTpuTargetConfig,
}


@dataclass(kw_only=True)
class DispatchConfig:
    targets: dict[str, Any]
    priority: list[str]
    path: Path


def default_path() -> Path:
    return user_path(CONFIG_ENV, "XDG_CONFIG_HOME", "~/.config", "dispatch.yaml")


def _check_type(where: str, value: Any, tp: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        kept = [a for a in args if a is not type(None)]
        return _check_type(where, value, kept[0])
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_check_type(f"{where}[{i}]", v, args[0]) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        item_where = (
            (lambda k: f"{where[:-1]}.{k}'") if where.endswith("'") else (lambda k: f"{where}.{k}")
        )
        return {
            _check_type(f"{where} key", k, args[0]): _check_type(item_where(k), v, args[1])
            for k, v in value.items()
        }
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if not isinstance(value, tp):
        raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_no_control(where: str, value: Any) -> None:
    """No control character in a target's strings: they end up in generated scripts, where a
    newline would end the line (a comment, an #SBATCH directive) that holds them."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_no_control(f"{where[:-1]}.{key}'" if where.endswith("'") else where, key)
            _check_no_control(f"{where[:-1]}.{key}'" if where.endswith("'") else where, item)
    elif isinstance(value, list):
        for item in value:
            _check_no_control(where, item)
    elif isinstance(value, str) and (found := _CONTROL.search(value)):
        raise ConfigError(f"{where} holds a control character ({found.group(0)!r}); use one line")


def _check_shape(where: str, value: Any, metadata: Any) -> None:
    """The value (each item of a list) has the field's ``shape``, each key of a mapping its
    ``key_shape``; else one line naming the key (:mod:`theseus.dispatch.value_shapes`)."""
    shape, key_shape = metadata.get("shape"), metadata.get("key_shape")
    if shape:
        listed = isinstance(value, list)
        for item in value if listed else [value]:
            problem = shape_problem(shape, item)
            if problem is not None:
                raise ConfigError(
                    f"{where}: each entry {problem}" if listed else f"{where} {problem}"
                )
    if key_shape and isinstance(value, dict):
        for key in value:
            problem = shape_problem(key_shape, key)
            if problem is not None:
                raise ConfigError(f"{where}: each name {problem}")


def build_target(name: str, raw: Any, schemas: dict[str, type], path: Path | str) -> Any:
    """Validate one target's mapping against the schema its ``type`` picks."""
    prefix = f"{path}: target {name!r}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix}: expected a mapping of keys, got {raw!r}")
    kind = raw.get("type")
    if kind not in schemas:
        known = ", ".join(sorted(schemas))
        raise ConfigError(f"{prefix}: key 'type' must be one of {known}, got {kind!r}")
    schema = schemas[kind]
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            close = get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{prefix}: unknown key {key!r} for type {kind}{hint}")
        values[key] = _check_type(f"{prefix}: key {key!r}", value, hints[key])
        _check_no_control(f"{prefix}: key {key!r}", values[key])
        _check_shape(f"{prefix}: key {key!r}", values[key], fields[key].metadata)
        declared = range_of(fields[key].metadata)
        problem = declared.problem(values[key]) if declared is not None else None
        if problem is not None:
            raise ConfigError(f"{prefix}: key {key!r} {problem}")
    missing = [
        n
        for n, f in fields.items()
        if n not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{prefix}: missing required key(s): {', '.join(missing)}")
    config = schema(**values)
    problem = config.problem() if hasattr(config, "problem") else None
    if problem is not None:
        raise ConfigError(f"{prefix}: {problem}")
    if config.group not in GROUPS:
        raise ConfigError(f"{prefix}: key 'group' must be one of {', '.join(GROUPS)}")
    for secret in config.secrets:
        if secret in config.env:
            raise ConfigError(f"{prefix}: {secret!r} is both in 'env' and 'secrets'")
    return config


def load(path: str | os.PathLike | None = None, schemas: dict[str, type] | None = None):
    """Read and validate the dispatch config file."""
    file = Path(path) if path else default_path()
    schemas = schemas or BUILTIN_SCHEMAS
    if not file.exists():
        raise ConfigError(
            f"no dispatch config at {file}: write one (see docs/dispatch.md) "
            "or pass --dispatch-config"
        )
    try:
        data = safe_yaml.load(file.read_text()) or {}
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{file}: cannot be read as text ({error})") from error
    except yaml.YAMLError as error:
        raise ConfigError(f"{file}: not valid YAML: {safe_yaml.problem(error)}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a mapping with 'targets'")
    unknown = set(data) - {"targets", "priority"}
    if unknown:
        raise ConfigError(f"{file}: unknown top-level key(s) {sorted(unknown)}; use 'targets'")
    raw_targets = data.get("targets") or {}
    if not isinstance(raw_targets, dict) or not raw_targets:
        raise ConfigError(f"{file}: 'targets' must be a non-empty mapping of name -> target")
    targets = {str(n): build_target(str(n), t, schemas, file) for n, t in raw_targets.items()}
    priority = data.get("priority") or list(targets)
    if not isinstance(priority, list):
        raise ConfigError(f"{file}: 'priority' must be a list of target names")
    for name in priority:
        if name not in targets:
            raise ConfigError(f"{file}: 'priority' names unknown target {name!r}")
    priority += [n for n in targets if n not in priority]
    return DispatchConfig(targets=targets, priority=priority, path=file)
