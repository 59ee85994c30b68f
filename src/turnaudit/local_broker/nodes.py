"""One KRaft node's files and process, and the loopback probes: is a pid alive, is a
port taken, which ports are free."""

from __future__ import annotations

import os
import socket
from pathlib import Path


class Node:
    """One KRaft node's files and process."""

    def __init__(self, node_id: int, folder: Path, port: int, controller_port: int) -> None:
        self.node_id = node_id
        self.folder = folder
        self.port = port
        self.controller_port = controller_port
        self.data_dir = folder / "data"
        self.config_file = folder / "server.properties"
        self.pid_file = folder / "broker.pid"
        self.log_file = folder / "broker.log"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        """The node's pid, if the pid file names a live broker of this folder
        (a stale file whose pid was reused by another program is ignored)."""
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ValueError):
            return None
        ours = b"kafka.Kafka" in cmdline and str(self.config_file).encode() in cmdline
        return pid if ours else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not_zombie(pid)
    return done == 0


def not_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all held open until every one is chosen)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]
