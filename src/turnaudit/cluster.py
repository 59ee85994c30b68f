"""Which cluster a command talks to: the user's, or the project's local broker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from turnaudit.errors import ConfigurationError
from turnaudit.kafka.access import check_group_access, check_topic_access
from turnaudit.kafka.producer import check_passthrough_options
from turnaudit.kafka.topics import CLUSTER_HINT, LOCAL_BROKER_HINT, require_cluster
from turnaudit.local_broker import LocalBrokerSettings, LocalKafkaBroker, saved_layout
from turnaudit.settings import KafkaSettings


def local_broker() -> LocalKafkaBroker:
    """The project's local broker, as its folder was last started (nodes, security, ports)."""
    return LocalKafkaBroker(saved_layout(LocalBrokerSettings.from_env()))


def connect(
    settings: KafkaSettings, *, start_local: bool, wait: float | None = None, require: bool = True
) -> tuple[KafkaSettings, str]:
    """Settings with a bootstrap address that answers, and a line saying where it points.

    ``KAFKA_BOOTSTRAP_SERVERS`` wins; otherwise the local broker is used,
    started first when ``start_local`` (the demo) and expected running otherwise.
    A secured local broker is reached over TLS with its own CA; the principal
    is the one the settings name (``TURNAUDIT_KAFKA_USERNAME``).
    A cluster that does not answer within ``wait`` seconds (default: the
    settings' connect timeout) ends the command with one line saying so, unless
    ``require`` is false: a long-running service starts anyway, reports itself
    not ready and says so in its log until the cluster answers. Passthrough
    librdkafka options it refuses end the command first (one line, exit 2).
    """
    check_passthrough_options(settings)
    if settings.bootstrap_servers:
        if require:
            require_cluster(settings, wait=wait, hint=CLUSTER_HINT)
        return settings, f"cluster at {settings.bootstrap_servers} (KAFKA_BOOTSTRAP_SERVERS)"
    broker = local_broker()
    status = broker.start() if start_local else broker.status()
    where = f"local broker: {status.describe()}"
    local = settings.with_bootstrap(broker.bootstrap_servers)
    if broker.settings.secured:
        if local.security.credentials is None:
            raise ConfigurationError(
                f"the local broker is secured (SASL_SSL): set TURNAUDIT_KAFKA_USERNAME and "
                f"TURNAUDIT_KAFKA_PASSWORD_FILE (the local principals' passwords are in "
                f"{broker.secrets_dir})"
            )
        security = local.security
        local = local.with_security(
            replace(security, protocol="sasl_ssl", ca_file=security.ca_file or broker.ca_file)
        )
    if require:
        require_cluster(local, wait=wait, hint=LOCAL_BROKER_HINT)
    return local, where


def require_access(
    settings: KafkaSettings,
    *,
    reads: Sequence[str] = (),
    writes: Sequence[str] = (),
    groups: Sequence[str] = (),
) -> None:
    """End the command with one line (exit 3) when the cluster's ACLs do not let the
    configured principal read ``reads``, write ``writes`` or use the consumer groups
    ``groups``: a denial said before any work, not a stream of failed deliveries, a
    topic that seems absent or a group that never answers."""
    config = settings.client_config({"log_level": 0})
    principal = settings.security.principal
    check_topic_access(
        config, principal, reads=reads, writes=writes, timeout=settings.connect_timeout_s
    )
    for group in groups:
        check_group_access(config, principal, group, timeout=settings.connect_timeout_s)
