"""The JVM side of the local broker: the tools it needs on PATH, the jars Maven
resolves, the storage format (cluster id, SCRAM users) and a node's process."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

from turnaudit.errors import BrokerError, MissingToolError
from turnaudit.local_broker.nodes import Node
from turnaudit.local_broker.settings import LocalBrokerSettings


def require_tool(name: str, install_hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingToolError(f"{name} not found: install {install_hint}")
    return path


def java() -> str:
    return require_tool("java", "a Java 17+ runtime (apt-get install openjdk-17-jre-headless)")


def ensure_jars(settings: LocalBrokerSettings) -> Path:
    """Resolve the broker jars with Maven unless they are already there."""
    jars = settings.jars_dir.resolve()
    if (jars / ".resolved").exists():
        return jars
    java()
    mvn = require_tool("mvn", "Apache Maven (apt-get install maven)")
    pom = settings.pom.resolve()
    if not pom.exists():
        raise BrokerError(f"no {pom}: run from the project folder or set TURNAUDIT_PROJECT_DIR")
    result = subprocess.run(
        [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={jars}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        output = result.stdout[-2000:] + result.stderr[-2000:]
        raise BrokerError(f"mvn could not resolve the Kafka jars: {output}")
    (jars / ".resolved").touch()
    return jars


def cluster_id(home: Path) -> str:
    path = home / "cluster.id"
    if path.exists():
        return path.read_text().strip()
    value = "-"
    while value.startswith("-"):  # the storage tool would read it as an option
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    path.write_text(value)
    return value


# Every file a node writes is its owner's alone (segments hold what turns said):
# the JVM creates files 0666 and folders 0777 less this mask.
OWNER_ONLY_UMASK = 0o077


def format_storage(
    node: Node, classpath: str, log_config: Path, cluster: str, scram: Sequence[str]
) -> None:
    """Format one node's storage (the caller skips a node already formatted).

    The storage tool's arguments, ``--add-scram`` with its password among them,
    go through a java argument file (``@file``, mode 0600, removed after): the
    launcher reads them, so no password is on the command line another local
    user can read in the process list. ``-XX:-UsePerfData`` keeps them out of
    the JVM's shared performance file too."""
    argfile = node.folder / "format.args"
    arguments = ["kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(node.config_file)]
    argfile.unlink(missing_ok=True)
    fd = os.open(argfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.writelines(_argfile_line(a) for a in [*arguments, *scram])
    try:
        result = subprocess.run(
            [
                java(),
                "-XX:-UsePerfData",
                "-cp",
                classpath,
                f"-Dlog4j2.configurationFile={log_config}",
                f"@{argfile}",
            ],
            capture_output=True,
            text=True,
            check=False,
            umask=OWNER_ONLY_UMASK,
        )
    finally:
        argfile.unlink(missing_ok=True)
    if result.returncode != 0:
        raise BrokerError(f"formatting Kafka storage failed: {result.stdout}{result.stderr}")


def _argfile_line(argument: str) -> str:
    """One argument of a java ``@file``, quoted (the launcher unquotes it)."""
    return '"' + argument.replace("\\", "\\\\").replace('"', '\\"') + '"\n'


def launch(node: Node, heap: str, classpath: str, log_config: Path) -> subprocess.Popen[bytes]:
    """Start a node; every file and folder it creates is its owner's alone."""
    fd = os.open(node.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen(
            [
                java(),
                f"-Xmx{heap}",
                f"-Xms{heap}",
                "-XX:+UseG1GC",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={log_config}",
                "-cp",
                classpath,
                "kafka.Kafka",
                str(node.config_file),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives the CLI that started it
            umask=OWNER_ONLY_UMASK,
        )
    node.pid_file.write_text(str(proc.pid))
    return proc
