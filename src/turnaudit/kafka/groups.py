"""Every consumer group the project's commands join or name, and whose it is.

One home for the names, so that the ACL plan (``turnaudit.kafka.acls``) grants
exactly what the commands use. Under the topic prefix ``P``:

* ``P<service>``: a service's group, one literal name each (``log-sink``,
  ``verdict-metrics``, ``otel-sink``, ``htir-feeder``, ``auditor-worker``,
  ``verify-follow``), granted to that service's principal alone by a LITERAL ACL.
* ``P<user>.``: each principal's own namespace. The project's readers running
  as ``<user>`` put their throwaway groups there (``reader-``, ``offsets-``,
  ``replay-reader-``, a fresh ``auditor run``'s ``auditor-run-``, each with a
  random tail), and a subscriber team names its own groups there
  (``P subscriber-<team>.<purpose>``).
* ``P replay.``: the groups of ``replay --group NAME`` (``P replay.NAME``), the
  reconciler's.

No user name holds a dot and none is ``replay``: so no namespace is a prefix of
another, and no literal name falls under one (the literal names hold no dot
after ``P``). Without a SASL principal (a plaintext cluster) the namespace is
``P anonymous.``.
"""

from __future__ import annotations

import uuid

from turnaudit.settings import KafkaSettings

REPLAY_NAMESPACE = "replay"
ANONYMOUS = "anonymous"


def service_group(prefix: str, service: str) -> str:
    """A service's group: per deployment, so two prefixes on one cluster never share one."""
    return f"{prefix}{service}"


def namespace(prefix: str, user: str) -> str:
    """The groups ``user`` owns: every name starting with this."""
    return f"{prefix}{user}."


def replay_namespace(prefix: str) -> str:
    return f"{prefix}{REPLAY_NAMESPACE}."


def replay_group_id(prefix: str, name: str) -> str:
    """The group of ``replay --group NAME``."""
    return replay_namespace(prefix) + name


def client_user(settings: KafkaSettings) -> str:
    """The user the cluster sees for ``settings``' clients (the passthrough options win,
    as they do in ``client_config``)."""
    user = settings.client_options.get("sasl.username") or settings.security.principal
    return str(user) if user else ANONYMOUS


def own_group(settings: KafkaSettings, purpose: str) -> str:
    """A fresh group in the namespace of the client's own principal: ``purpose`` says
    which reader made it (``reader``, ``offsets``, ``replay-reader``, ``auditor-run``)."""
    return f"{namespace(settings.topics.prefix, client_user(settings))}{purpose}-{uuid.uuid4().hex}"
