"""The JVM side of the local broker: the tools it needs on PATH, the jars Maven
resolves, the storage format (cluster id, SCRAM users) and a node's process."""

from __future__ import annotations

import base64
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


def format_storage(
    node: Node, classpath: str, log_config: Path, cluster: str, scram: Sequence[str]
) -> None:
    """Format one node's storage (the caller skips a node already formatted)."""
    result = subprocess.run(
        [
            java(),
            "-cp",
            classpath,
            f"-Dlog4j2.configurationFile={log_config}",
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster,
            "-c",
            str(node.config_file),
            *scram,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BrokerError(f"formatting Kafka storage failed: {result.stdout}{result.stderr}")


def launch(node: Node, heap: str, classpath: str, log_config: Path) -> subprocess.Popen[bytes]:
    with open(node.log_file, "ab") as log:
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
        )
    node.pid_file.write_text(str(proc.pid))
    return proc
