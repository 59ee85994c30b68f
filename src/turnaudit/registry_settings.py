"""The Schema Registry's settings, read from the environment: plain data.

* ``TURNAUDIT_SCHEMA_REGISTRY_BASIC_AUTH`` = ``user:password`` (HTTP basic auth), or
  ``TURNAUDIT_SCHEMA_REGISTRY_BEARER_TOKEN`` (a static bearer token), or any client
  option of ``confluent_kafka.schema_registry`` in ``TURNAUDIT_SCHEMA_REGISTRY_OPTIONS``
  (a JSON object: TLS files, OAuth, ...).
* ``TURNAUDIT_SCHEMA_REGISTRY_AUTO_REGISTER`` = ``false``: use schemas registered
  beforehand; the publisher only looks them up.

``KafkaSettings.from_env`` keeps them; the client (``turnaudit.kafka.schema_registry``)
takes them from the settings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from turnaudit.errors import ConfigurationError

ENV = "TURNAUDIT_SCHEMA_REGISTRY_"


# A client option's value: text, or a number where the client wants one (``timeout``,
# ``max.retries``, ``cache.capacity``: it refuses them as text).
RegistryOption = str | int | float


def registry_options_from_env(env: Mapping[str, str]) -> dict[str, RegistryOption]:
    """Client options for the registry (credentials and passthrough), from the environment."""
    text = env.get(ENV + "OPTIONS", "").strip()
    try:
        options = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{ENV}OPTIONS is not a JSON object: {exc}") from exc
    if not isinstance(options, dict):
        raise ConfigurationError(f"{ENV}OPTIONS must be a JSON object")
    config: dict[str, RegistryOption] = {
        str(k): v if isinstance(v, int | float) and not isinstance(v, bool) else str(v)
        for k, v in options.items()
    }
    basic = env.get(ENV + "BASIC_AUTH", "").strip()
    bearer = env.get(ENV + "BEARER_TOKEN", "").strip()
    if basic and bearer:
        raise ConfigurationError(f"set {ENV}BASIC_AUTH or {ENV}BEARER_TOKEN, not both")
    if basic:
        if ":" not in basic:
            raise ConfigurationError(f"{ENV}BASIC_AUTH must be user:password")
        config["basic.auth.user.info"] = basic
    if bearer:
        config["bearer.auth.credentials.source"] = "STATIC_TOKEN"
        config["bearer.auth.token"] = bearer
        # Required by some client versions (2.12 both, 2.16 neither); Confluent Cloud
        # reads them, other registries ignore them.
        config.setdefault("bearer.auth.logical.cluster", "")
        config.setdefault("bearer.auth.identity.pool.id", "")
    return config


def auto_register_from_env(env: Mapping[str, str]) -> bool:
    text = env.get(ENV + "AUTO_REGISTER", "true").strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(f"{ENV}AUTO_REGISTER must be true or false, not {text!r}")
    return text == "true"
