"""The project's local schema registry (Apicurio Registry), as the broker tier starts it,
and what a test asks of it over its Confluent-compatible API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support import PROJECT_ROOT
from turnaudit.local_broker import free_ports
from turnaudit.local_registry import LocalRegistrySettings


def local_registry_settings(home: Path) -> LocalRegistrySettings:
    port, management_port = free_ports(2)
    target = PROJECT_ROOT / "deploy/registry/target"
    return LocalRegistrySettings(
        home=home,
        server=target / "server",
        java_dir=target / "java",
        pom=PROJECT_ROOT / "deploy/registry/pom.xml",
        port=port,
        management_port=management_port,
    )


def ccompat(url: str, path: str, body: Any = None, method: str | None = None) -> tuple[int, Any]:
    """(status, JSON) of one call to the registry's Confluent-compatible API at ``url``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - the loopback registry
        f"{url}{path}",
        data=data,
        method=method or ("POST" if data is not None else "GET"),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read() or b"null")


def subject_ids(url: str, subject: str) -> dict[int, int]:
    """Each version registered under ``subject``: its schema id."""
    status, versions = ccompat(url, f"/subjects/{subject}/versions")
    assert status == 200, versions
    return {v: ccompat(url, f"/subjects/{subject}/versions/{v}")[1]["id"] for v in versions}
