"""Shells on a target: local subprocesses or Fabric over SSH, with bounded timeouts.

Every command is a string for ``bash -c`` built with :func:`shlex.quote`; every failure
becomes a :class:`DispatchError` naming the host. Host keys are verified against
``known_hosts`` unless the target sets ``insecure_skip_host_key_check``.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from dataclasses import dataclass
from typing import Any

from theseus.core.errors import TheseusError

logging.getLogger("paramiko").setLevel(logging.WARNING)


class DispatchError(TheseusError):
    """Submitting, watching or cancelling a run on a target failed."""


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str


def q(value: Any) -> str:
    """One shell word."""
    return shlex.quote(str(value))


class Shell:
    """Where commands run: ``run`` a bash command, ``put`` a file."""

    label = "?"
    home: str | None = None  # the remote $HOME, once asked (``launch.resolve_paths``)

    def run(self, command: str, timeout: float | None = None, check: bool = True) -> Result:
        raise NotImplementedError

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        raise NotImplementedError

    def stream(self, command: str, out: Any) -> int:
        """Run with no timeout, copying output to ``out`` as it comes (``logs -f``)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _checked(self, command: str, result: Result, check: bool) -> Result:
        if check and result.rc != 0:
            detail = result.stderr.strip() or result.stdout.strip() or f"exit {result.rc}"
            raise DispatchError(f"{self.label}: {detail.splitlines()[-1]}")
        return result

    def __enter__(self) -> Shell:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LocalShell(Shell):
    label = "localhost"

    def __init__(self, env: dict[str, str] | None = None, timeout: float = 20.0) -> None:
        self.env = {**os.environ, **(env or {})}
        self.timeout = timeout

    def run(self, command: str, timeout: float | None = None, check: bool = True) -> Result:
        try:
            done = subprocess.run(
                ["bash", "-c", command],
                capture_output=True,
                text=True,
                env=self.env,
                stdin=subprocess.DEVNULL,
                timeout=timeout or self.timeout,
            )
        except subprocess.TimeoutExpired as error:
            raise DispatchError(f"{self.label}: timed out after {error.timeout:.0f} s") from error
        return self._checked(command, Result(done.returncode, done.stdout, done.stderr), check)

    def stream(self, command: str, out: Any) -> int:
        with subprocess.Popen(
            ["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=self.env, text=True,
        ) as proc:  # fmt: skip
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                out.flush()
            return proc.wait()

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        path = os.path.expanduser(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.fchmod(fd, mode)
            os.write(fd, data)
        finally:
            os.close(fd)


def split_host(text: str, default_port: int) -> tuple[str | None, str, int]:
    """``[user@]host[:port]`` -> (user, host, port)."""
    user, _, rest = text.rpartition("@")
    host, sep, port = rest.partition(":")
    try:
        return (user or None, host, int(port) if sep else default_port)
    except ValueError as error:
        raise DispatchError(f"host {text!r}: port {port!r} is not a number") from error


class SSHShell(Shell):
    """A Fabric connection, opened eagerly so errors surface before anything is created."""

    def __init__(self, host: str, ssh: Any, timeout: float = 20.0) -> None:
        import paramiko
        from fabric import Connection

        user, hostname, port = split_host(host, ssh.port)
        user = user or ssh.user
        self.label = f"{user + '@' if user else ''}{hostname}:{port}"
        self.timeout = timeout
        connect_kwargs: dict[str, Any] = {
            "banner_timeout": ssh.connect_timeout,
            "auth_timeout": ssh.connect_timeout,
            "channel_timeout": ssh.connect_timeout,
        }
        if ssh.key_file:
            connect_kwargs.update(
                key_filename=os.path.expanduser(ssh.key_file),
                look_for_keys=False,
                allow_agent=False,
            )
        self.conn = Connection(
            hostname,
            user=user,
            port=port,
            connect_timeout=max(1, int(ssh.connect_timeout)),
            connect_kwargs=connect_kwargs,
        )
        client = self.conn.client
        if ssh.insecure_skip_host_key_check:
            client.set_missing_host_key_policy(paramiko.WarningPolicy())
        else:
            known = os.path.expanduser(ssh.known_hosts)
            if os.path.exists(known):
                client.load_host_keys(known)
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            self.conn.open()
        except paramiko.BadHostKeyException as error:
            raise DispatchError(
                f"{self.label}: host key does not match {ssh.known_hosts} (possible attack)"
            ) from error
        except paramiko.SSHException as error:
            text = str(error)
            if "not found in known_hosts" in text:
                raise DispatchError(
                    f"{self.label}: host key not in {ssh.known_hosts}; add it (ssh-keyscan) "
                    "or set insecure_skip_host_key_check: true"
                ) from error
            if isinstance(error, paramiko.AuthenticationException):
                raise DispatchError(f"{self.label}: authentication refused ({text})") from error
            raise DispatchError(
                f"{self.label}: SSH failed: {text or type(error).__name__}"
            ) from error
        except TimeoutError as error:
            raise DispatchError(
                f"{self.label}: no answer within {ssh.connect_timeout:.0f} s"
            ) from error
        except OSError as error:
            raise DispatchError(
                f"{self.label}: cannot connect: {error.strerror or error}"
            ) from error

    def run(self, command: str, timeout: float | None = None, check: bool = True) -> Result:
        from invoke.exceptions import CommandTimedOut

        try:
            done = self.conn.run(
                f"bash -c {q(command)}",
                hide=True,
                warn=True,
                in_stream=False,
                timeout=timeout or self.timeout,
            )
        except CommandTimedOut as error:
            raise DispatchError(f"{self.label}: timed out after {error.timeout} s") from error
        except (OSError, EOFError) as error:
            raise DispatchError(f"{self.label}: connection lost: {error}") from error
        return self._checked(command, Result(done.exited, done.stdout, done.stderr), check)

    def stream(self, command: str, out: Any) -> int:
        done = self.conn.run(
            f"bash -c {q(command)}", out_stream=out, err_stream=out, warn=True, in_stream=False
        )
        return done.exited

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        import paramiko

        if path.startswith("~/"):
            path = path[2:]
        sftp = self._sftp()
        try:
            with sftp.open(path, "wb") as handle:
                sftp.chmod(path, mode)  # before any byte lands: secrets are never world-readable
                handle.set_pipelined(True)
                handle.write(data)
        except OSError as error:  # paramiko maps SFTP status codes to IOError/OSError
            reason = error.strerror or str(error) or type(error).__name__
            raise DispatchError(f"{self.label}: cannot write {path}: {reason}") from error
        except (EOFError, paramiko.SSHException) as error:
            raise DispatchError(f"{self.label}: connection lost while uploading {path}") from error

    def _sftp(self) -> Any:
        """The connection's SFTP client; a server without the SFTP subsystem (sshd_config
        has no ``Subsystem sftp`` line) is one line saying so, not paramiko's traceback."""
        import paramiko

        try:
            return self.conn.sftp()
        except (EOFError, paramiko.SSHException) as error:
            transport = self.conn.client.get_transport()
            if transport is None or not transport.is_active():
                raise DispatchError(f"{self.label}: connection lost: {error}") from error
            raise DispatchError(
                f"{self.label}: the SSH server offers no SFTP, which theseus needs to upload "
                "the bundle and launch files; enable it in the host's sshd_config (e.g. "
                "`Subsystem sftp internal-sftp`) or use another host"
            ) from error

    def close(self) -> None:
        self.conn.close()
