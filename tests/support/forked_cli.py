"""``turnaudit`` as a real process, without an interpreter start and the CLI's imports each time.

A server process (one per test process, started at the first run) imports ``turnaudit.cli``
once; each run is a child forked from it: its own pid, environment, working folder, stdin
(/dev/null), stdout, stderr and exit code, running ``main`` as ``python -m turnaudit.cli``
does (an uncaught exception prints its traceback and exits 1, ``SystemExit`` exits with its
code, exit functions run). A table of a hundred runs then costs a fork each instead of
about 0.3 s of CPU each. Nothing in the project reads its environment at import time (the
settings are read when a command runs), so a child forked from the server behaves as a
fresh interpreter with the child's environment; ``tests/unit/test_forked_cli.py`` holds the
two ways to the same output.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

SERVER = r"""
import json, os, select, signal, sys, time, traceback

import turnaudit.cli

turnaudit.cli.build_parser()  # imports every command's module, as each run would
requests, replies = os.dup(0), os.dup(1)  # the protocol; fds 0-2 become each child's
devnull = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1):
    os.dup2(devnull, fd)


def child(request):
    os.close(requests)
    os.close(replies)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    os.dup2(devnull, 0)
    sys.argv = [turnaudit.cli.__file__, *request["argv"]]
    try:
        code = turnaudit.cli.main(request["argv"])
    except SystemExit as stop:  # as the interpreter treats one that reaches the top
        code = stop.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code or 0)


running = {}  # pid -> (request id, deadline)
buffered = b""
while True:
    ready, _, _ = select.select([requests], [], [], 0.005 if running else None)
    if ready:
        data = os.read(requests, 1 << 16)
        if not data:
            break
        buffered += data
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                child(request)
            running[pid] = (request["id"], time.monotonic() + request["timeout"])
    while running:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        rid, deadline = running.pop(pid)
        reply = {"id": rid, "returncode": os.waitstatus_to_exitcode(status), "pid": pid}
        reply["timed_out"] = time.monotonic() > deadline
        os.write(replies, json.dumps(reply).encode() + b"\n")
    now = time.monotonic()
    for pid, (_, deadline) in running.items():
        if now > deadline:
            os.kill(pid, signal.SIGKILL)
for pid in running:
    os.kill(pid, signal.SIGKILL)
"""

NO_TIMEOUT_S = 24 * 3600.0


class ForkedCli:
    """The server and the runs waiting for it; safe to use from several threads."""

    def __init__(self) -> None:
        self._server = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self._server.stdin is not None
        assert self._server.stdout is not None
        self._requests: IO[bytes] = self._server.stdin
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._replies: dict[int, dict[str, int | bool]] = {}
        self._arrived = threading.Condition(self._lock)
        threading.Thread(target=self._read, args=(self._server.stdout,), daemon=True).start()
        atexit.register(self.close)

    def _read(self, replies: IO[bytes]) -> None:
        for line in replies:
            reply = json.loads(line)
            with self._arrived:
                self._replies[reply["id"]] = reply
                self._arrived.notify_all()
        with self._arrived:
            self._replies[-1] = {"server_exited": True}
            self._arrived.notify_all()

    def run(
        self,
        argv: list[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """As ``subprocess.run([python, -m, turnaudit.cli, *argv], capture_output=True,
        text=True, env=env, cwd=cwd, timeout=timeout, check=False)``."""
        with tempfile.TemporaryDirectory(prefix="turnaudit-run-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            with self._lock:
                rid = next(self._ids)
                request = {
                    "id": rid,
                    "argv": argv,
                    "env": dict(os.environ if env is None else env),
                    "cwd": str(cwd or os.getcwd()),
                    "stdout": str(out),
                    "stderr": str(err),
                    "timeout": NO_TIMEOUT_S if timeout is None else timeout,
                }
                self._requests.write(json.dumps(request).encode() + b"\n")
                self._requests.flush()
                while rid not in self._replies:
                    assert -1 not in self._replies, "the forked CLI server exited"
                    self._arrived.wait()
                reply = self._replies.pop(rid)
            stdout, stderr = out.read_text(), err.read_text()
        if reply["timed_out"]:
            raise subprocess.TimeoutExpired(argv, timeout or 0, stdout, stderr)
        return subprocess.CompletedProcess(argv, int(reply["returncode"]), stdout, stderr)

    def close(self) -> None:
        if self._server.poll() is None:
            self._requests.close()
            try:
                self._server.wait(10)
            except subprocess.TimeoutExpired:
                self._server.kill()


_SERVER: ForkedCli | None = None
_STARTING = threading.Lock()


def forked_cli() -> ForkedCli:
    """This test process's server, started at the first call."""
    global _SERVER  # noqa: PLW0603 - one server per test process
    with _STARTING:
        if _SERVER is None or _SERVER._server.poll() is not None:
            _SERVER = ForkedCli()
        return _SERVER


def forked_turnaudit(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``turnaudit ARGS`` as a child of the server (``run_turnaudit``'s result, forked)."""
    return forked_cli().run(list(args), env=env, cwd=cwd, timeout=timeout)
