"""The project's local broker as a secured single node or a three-node cluster, for
the tests that need one of their own (free ports, a temporary folder). If it
cannot start, the test fails: it never skips."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import PROJECT_ROOT
from turnaudit.kafka.acls import apply_acls, plan_acls
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import (
    LOCAL_SUBSCRIBERS,
    LocalBrokerSettings,
    LocalKafkaBroker,
    free_ports,
)
from turnaudit.settings import KafkaSettings
from turnaudit.topic_names import TopicNames


def cluster_settings(
    home: Path, *, nodes: int = 1, security: str = "plaintext"
) -> LocalBrokerSettings:
    ports = free_ports(2 * nodes)
    return LocalBrokerSettings(
        home=home,
        jars_dir=PROJECT_ROOT / "deploy/kafka/target/jars",
        pom=PROJECT_ROOT / "deploy/kafka/pom.xml",
        port=ports[0],
        controller_port=ports[nodes],
        heap="400m",
        nodes=nodes,
        security=security,
        ports=tuple(ports[:nodes]),
        controller_ports=tuple(ports[nodes:]),
    )


@contextmanager
def running(settings: LocalBrokerSettings) -> Iterator[LocalKafkaBroker]:
    broker = LocalKafkaBroker(settings)
    try:
        broker.start(timeout=180)
        yield broker
    finally:
        broker.stop()


def admin_settings(broker: LocalKafkaBroker, prefix: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers=broker.bootstrap_servers,
        topics=TopicNames(prefix),
        partitions=3,
        security=broker.security(),
        connect_timeout_s=10,
    )


def secure_setup(broker: LocalKafkaBroker, prefix: str) -> KafkaSettings:
    """The planned ACLs and the topics under ``prefix``, as the admin."""
    admin = admin_settings(broker, prefix)
    apply_acls(
        admin.client_config({"log_level": 0}), plan_acls(prefix, subscribers=LOCAL_SUBSCRIBERS)
    )
    ensure_topics(admin, strict=True)
    return admin


def principal_env(broker: LocalKafkaBroker, user: str, prefix: str, **extra: str) -> dict[str, str]:
    """A clean environment for a ``turnaudit`` process acting as ``user``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TURNAUDIT_") and k != "KAFKA_BOOTSTRAP_SERVERS"
    }
    env |= broker.client_env(user)
    env |= {
        "TURNAUDIT_TOPIC_PREFIX": prefix,
        "TURNAUDIT_TOPIC_PARTITIONS": "3",
        "TURNAUDIT_CONNECT_TIMEOUT_S": "8",
        "TURNAUDIT_GROUP_INSTANCE_ID": "none",
        **extra,
    }
    return env


def reconciled(stdout: str, returncode: int) -> bool:
    """``verify`` found every turn: exit 0; or exit 1 whose only unexplained findings are
    ``lost_in_crash`` from ``<prefix>stream-heads`` while the stream itself says ``lost 0``
    (verify's stream-heads reading reports those for a publisher that closed cleanly, on
    a plaintext single broker too: not a loss this cluster's setup causes)."""
    if returncode == 0:
        return True
    summary = [line for line in stdout.splitlines() if "unexplained finding(s):" in line]
    return (
        returncode == 1
        and "lost 0," in stdout
        and len(summary) == 1
        and summary[0].split(":", 2)[-1].split() == ["lost_in_crash", summary[0].split()[-1]]
    )


# -- the secured start, its child processes watched -------------------------------------

WATCHED_TOOLS = ("java", "keytool")


@dataclass(frozen=True)
class SecuredCluster:
    """A secured local cluster, and the folder where every java and keytool its start
    ran left its argv (one file per call, the arguments NUL-separated)."""

    broker: LocalKafkaBroker
    tool_calls: Path


def wrapped_tools(folder: Path, calls: Path) -> Path:
    """A folder of stand-ins for java and keytool, put first on PATH: each writes its
    argv as given to a file of its own under ``calls``, then becomes the real tool
    (``exec``: same pid, so the running broker's /proc entry is the real java's)."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in WATCHED_TOOLS:
        real = shutil.which(tool)
        assert real is not None, f"the test machine needs the JDK's {tool}"
        script = folder / tool
        script.write_text(
            "#!/bin/sh\n"
            f'f=$(mktemp "{calls}/{tool}.XXXXXX")\n'
            'printf \'%s\\0\' "$@" > "$f"\n'
            f'exec "{real}" "$@"\n'
        )
        script.chmod(0o700)
    return folder


def tool_calls(calls: Path) -> list[tuple[str, list[str]]]:
    """(tool, argv) of every watched call."""
    found = []
    for path in sorted(calls.iterdir()):
        arguments = path.read_bytes().split(b"\0")[:-1]  # each one ends with a NUL
        found.append((path.name.split(".", 1)[0], [a.decode() for a in arguments]))
    return found


@contextmanager
def secured_cluster(root: Path) -> Iterator[SecuredCluster]:
    """A secured single node started (and stopped) with java and keytool watched."""
    calls = root / "tool-calls"
    calls.mkdir(parents=True)
    tools = wrapped_tools(root / "tools", calls)
    broker = LocalKafkaBroker(cluster_settings(root / "kafka", security="sasl_ssl"))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("PATH", f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")
            broker.start(timeout=180)
        yield SecuredCluster(broker, calls)
    finally:
        broker.stop()
