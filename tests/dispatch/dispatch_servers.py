"""Real daemons for the dispatch tests: sshd, munged + slurmctld/slurmd, on loopback."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD_BIN = "/usr/sbin/sshd"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_port(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout} s")


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def kill_pidfile(path: Path) -> None:
    kill_pid(read_pid(path))


def exited(pid: int) -> bool:
    """Whether ``pid`` has ended: gone, or a zombie. The daemons detach, so their parent is
    init, which here reaps an exited one only ~2 s later; until then ``kill(pid, 0)`` still
    succeeds, but the process holds no port, file or lock any more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # reaped meanwhile
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]  # the state follows "(comm)"


def kill_pid(pid: int | None) -> None:
    """SIGTERM ``pid`` and wait (at most 2.5 s) until it has exited."""
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        if exited(pid):
            return
        time.sleep(0.05)


@dataclass
class SSHD:
    host: str
    port: int
    directory: Path
    host_key: Path
    client_key: Path
    known_hosts: Path
    sftp: bool = True  # False: no `Subsystem sftp` line (a host that cannot take uploads)
    pidfile: Path = field(init=False)
    pid: int | None = field(init=False, default=None)

    def start(self) -> SSHD:
        self.pidfile = self.directory / f"sshd-{self.host}.pid"
        config = self.directory / f"sshd-{self.host}.conf"
        config.write_text(
            f"ListenAddress {self.host}\nPort {self.port}\nHostKey {self.host_key}\n"
            f"PidFile {self.pidfile}\nAuthorizedKeysFile {self.directory}/authorized_keys\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nPermitRootLogin prohibit-password\n"
            "MaxStartups 100\nMaxSessions 100\n"
            + ("Subsystem sftp internal-sftp\n" if self.sftp else "")
        )
        Path("/run/sshd").mkdir(exist_ok=True)
        log = self.directory / f"sshd-{self.host}.log"
        subprocess.run([SSHD_BIN, "-f", str(config), "-E", str(log)], check=True)
        wait_port(self.host, self.port)
        self.pid = read_pid(self.pidfile)  # kept in memory: stop() works even if tmp is gone
        return self

    def stop(self) -> None:
        kill_pid(self.pid)

    def known_hosts_line(self) -> str:
        key = " ".join((self.host_key.with_suffix(".pub")).read_text().split()[:2])
        return f"[{self.host}]:{self.port} {key}\n"


def start_sshds(
    directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "127.0.0.2"), sftp: bool = True
) -> list[SSHD]:
    """One sshd per loopback address, sharing a host key, a client key and known_hosts."""
    directory.mkdir(parents=True, exist_ok=True)
    host_key = keygen(directory / "host_key")
    client_key = keygen(directory / "client_key")
    shutil.copy(client_key.with_suffix(".pub"), directory / "authorized_keys")
    known = directory / "known_hosts"
    servers = [
        SSHD(h, free_port(h), directory, host_key, client_key, known, sftp).start() for h in hosts
    ]
    known.write_text("".join(s.known_hosts_line() for s in servers))
    return servers


# ----------------------------------------------------------------------------- SLURM


def start_munge() -> bool:
    """Start munged unless one answers; True when this call started it."""
    for d in ("/run/munge", "/var/log/munge", "/var/lib/munge", "/etc/munge"):
        Path(d).mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "munge", "munge")
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        key.write_bytes(os.urandom(1024))
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    if subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
        return False
    subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)
    for _ in range(50):
        if subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
            return True
        time.sleep(0.1)
    raise RuntimeError("munged did not start")


def stop_munge() -> None:
    kill_pidfile(Path("/run/munge/munged.pid"))


@dataclass
class Slurm:
    directory: Path
    nodes: int
    conf: Path = field(init=False)

    def start(self) -> Slurm:
        d = self.directory
        for sub in ("state", "spool"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        hostname = socket.gethostname()
        ctld_port = free_port()
        if self.nodes == 1:
            node_line = (
                f"NodeName={hostname} NodeAddr=127.0.0.1 Port={free_port()} CPUs=2 "
                "RealMemory=20000 State=UNKNOWN"
            )
            names = hostname
        else:
            base = free_port()
            while any(_busy(base + i) for i in range(self.nodes)):
                base = free_port()
            node_line = (
                f"NodeName=n[1-{self.nodes}] NodeHostname={hostname} NodeAddr=127.0.0.1 "
                f"Port=[{base}-{base + self.nodes - 1}] CPUs=1 RealMemory=10000 State=UNKNOWN"
            )
            names = f"n[1-{self.nodes}]"
        self.conf = d / "slurm.conf"
        self.conf.write_text(
            f"ClusterName=theseus{self.nodes}\nSlurmctldHost={hostname}(127.0.0.1)\n"
            f"SlurmctldPort={ctld_port}\nSlurmUser=root\nSlurmdUser=root\n"
            "AuthType=auth/munge\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
            "AccountingStorageType=accounting_storage/none\nJobAcctGatherType=jobacct_gather/none\n"
            "MpiDefault=none\nReturnToService=2\nSchedulerType=sched/backfill\n"
            f"StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool/%n\n"
            f"SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd-%n.pid\n"
            f"SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd-%n.log\n"
            "SlurmctldTimeout=30\nSlurmdTimeout=30\nInactiveLimit=0\nMinJobAge=30\nKillWait=5\n"
            "SchedulerParameters=sched_interval=1\n"
            f"{node_line}\nPartitionName=main Nodes={names} Default=YES MaxTime=INFINITE State=UP\n"
        )
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        subprocess.run(["slurmctld", "-c"], env=env, check=True)  # -c: fresh state
        if self.nodes == 1:
            (d / "spool" / hostname).mkdir(exist_ok=True)
            subprocess.run(["slurmd"], env=env, check=True)
        else:
            for i in range(1, self.nodes + 1):
                (d / "spool" / f"n{i}").mkdir(exist_ok=True)
                subprocess.run(["slurmd", "-N", f"n{i}"], env=env, check=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%T %D"], env=env, capture_output=True, text=True
            ).stdout.split()
            if out and out[0] == "idle" and int(out[1]) == self.nodes:
                return self
            time.sleep(0.3)
        raise RuntimeError(
            f"SLURM nodes not idle: {out}\n{(d / 'slurmctld.log').read_text()[-2000:]}"
        )

    def stop(self) -> None:
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)
        for pidfile in self.directory.glob("slurmd-*.pid"):
            kill_pidfile(pidfile)
        kill_pidfile(self.directory / "slurmctld.pid")


def _busy(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False
