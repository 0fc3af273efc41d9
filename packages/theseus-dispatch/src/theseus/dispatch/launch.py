"""Putting a bundle and a launch directory on a machine, all-or-nothing.

On each machine (an SSH host, a SLURM login node, a TPU worker)::

    <workdir>/bundles/<sha>/            the extracted bundle (its .venv after uv sync)
    <workdir>/launches/<run>/           bootstrap.sh, config.yaml, submission.json,
                                        secrets.env (0600), log.<i>, pid.<i>, exit.<i>

A bundle is extracted into a temporary directory and renamed into place, so a half
extracted one is never used. A previous launch directory of the same run is kept as
``<run>.<time>``. :func:`remove_launch` undoes a launch that failed midway.
"""

from __future__ import annotations

import json
import time

from theseus.dispatch.bootstrap import Paths, Submission, secrets_file
from theseus.dispatch.bundle import Bundle
from theseus.dispatch.remote import Shell, q


def expand(path: str, home: str) -> str:
    if path == "~":
        return home
    if path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    return path


def resolve_paths(shell: Shell, target, run: str, bundle_sha: str | None) -> Paths:
    home = getattr(shell, "home", None)
    if home is None:
        home = shell.home = shell.run('printf %s "$HOME"').stdout.strip() or "/"
    workdir = expand(target.workdir, home)
    root = expand(target.root, home)
    return Paths.under(workdir, root, run, bundle_sha[:16] if bundle_sha else "")


def ensure_bundle(shell: Shell, paths: Paths, bundle: Bundle, timeout: float) -> bool:
    """Upload and extract the bundle unless the machine has it. True when uploaded."""
    tmp = f"{paths.bundle_dir}.partial.{time.time_ns()}"
    marker = q(paths.bundle_dir + "/.theseus-bundle")
    if shell.run(f"test -f {marker} && echo have || mkdir -p {q(tmp)}").stdout.strip() == "have":
        return False
    try:
        shell.put(bundle.data, f"{tmp}.tar.gz")
        marker = q(f"{tmp}/.theseus-bundle")
        shell.run(
            f"tar -xzf {q(tmp + '.tar.gz')} -C {q(tmp)} && echo {q(bundle.sha)} > {marker} "
            f"&& rm -f {q(tmp + '.tar.gz')} "
            f"&& (mv -T {q(tmp)} {q(paths.bundle_dir)} 2>/dev/null || rm -rf {q(tmp)})",
            timeout=timeout,
        )
    except BaseException:
        shell.run(f"rm -rf {q(tmp)} {q(tmp + '.tar.gz')}", check=False)
        raise
    return True


def launch_files(
    sub: Submission, bootstrap: str, secrets: dict[str, str], extra: dict[str, str] | None = None
) -> dict[str, tuple[bytes, int]]:
    files = {
        "bootstrap.sh": (bootstrap.encode(), 0o755),
        "config.yaml": (sub.config_yaml.encode(), 0o644),
        "submission.json": (json.dumps(sub.record(), indent=2).encode(), 0o644),
    }
    for name, text in (extra or {}).items():
        files[name] = (text.encode(), 0o755 if name.endswith(".sh") else 0o644)
    from theseus.dispatch.leaks import MIN_LENGTH, SecretLeakError

    for name, (data, _) in files.items():  # the last look before they leave, in the clear
        for key, value in secrets.items():
            if len(value) >= MIN_LENGTH and value.encode() in data:
                raise SecretLeakError(f"{name} would hold the value of the secret ${key}")
    if secrets:
        files["secrets.env"] = (secrets_file(secrets), 0o600)
    return files


def write_launch(
    shell: Shell, paths: Paths, files: dict[str, tuple[bytes, int]], attempt: str
) -> None:
    """Create the launch directory with ``files`` (put with their modes before any byte).

    A directory left by an earlier attempt is moved aside; one of this attempt (hosts of a
    multi-host run that share a file system) is reused.
    """
    launch = q(paths.launch_dir)
    mine = q(f'"attempt": "{attempt}"')
    shell.run(
        f"if [ -d {launch} ] && ! grep -qF {mine} {launch}/submission.json 2>/dev/null; "
        f"then mv {launch} {launch}.$(date +%Y%m%d-%H%M%S).$$; fi; umask 077; mkdir -p {launch}"
    )
    for name, (data, mode) in files.items():
        shell.put(data, f"{paths.launch_dir}/{name}", mode)


def remove_launch(shell: Shell, paths: Paths) -> None:
    shell.run(f"rm -rf {q(paths.launch_dir)}", check=False)
