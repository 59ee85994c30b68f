"""The local schema registry's settings, from ``TURNAUDIT_REGISTRY_*``: plain data."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from turnaudit.errors import ConfigurationError
from turnaudit.settings import ENV_PREFIX, MAX_PORT, _int

# Off the ports the broker and the monitoring tools take on the same machine: the API on
# the Confluent Schema Registry's customary 8081 (Apicurio's own default, 8080, is the
# port every other Java server takes first), the management interface (health) on
# Quarkus's 9000 moved up by 10000, as the broker's controller port is.
REGISTRY_PORT = 8081
REGISTRY_MANAGEMENT_PORT = 19000
CCOMPAT_PATH = "/apis/ccompat/v7"  # Apicurio's Confluent-compatible API
MINIMUM_JAVA = 21  # Apicurio Registry 3.3 is built for class version 65


@dataclass(frozen=True)
class LocalRegistrySettings:
    """Apicurio Registry on loopback, run from the server Maven unpacked.

    ``home`` holds its H2 database (``data/``: ids and versions survive a restart),
    log and pid file; ``server`` the unpacked distribution (``quarkus-run.jar``);
    ``java_dir`` the Java runtime ``make registry`` fetches where no Java 21+ is
    installed.
    """

    home: Path = Path("var/registry")
    server: Path = Path("deploy/registry/target/server")
    java_dir: Path = Path("deploy/registry/target/java")
    pom: Path = Path("deploy/registry/pom.xml")
    port: int = REGISTRY_PORT
    management_port: int = REGISTRY_MANAGEMENT_PORT
    heap: str = "512m"

    def __post_init__(self) -> None:
        if self.port == self.management_port:
            raise ConfigurationError(
                f"{ENV_PREFIX}REGISTRY_PORT and {ENV_PREFIX}REGISTRY_MANAGEMENT_PORT are both "
                f"{self.port}: choose two ports"
            )

    @property
    def url(self) -> str:
        """What ``TURNAUDIT_SCHEMA_REGISTRY_URL`` names to use it."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.management_port}/health/ready"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LocalRegistrySettings:
        env = os.environ if env is None else env
        root = Path(env.get(ENV_PREFIX + "PROJECT_DIR", "."))
        target = root / "deploy/registry/target"
        return cls(
            home=Path(env.get(ENV_PREFIX + "REGISTRY_HOME", root / "var" / "registry")),
            server=Path(env.get(ENV_PREFIX + "REGISTRY_SERVER", target / "server")),
            java_dir=target / "java",
            pom=root / "deploy/registry/pom.xml",
            port=_int(env, "REGISTRY_PORT", REGISTRY_PORT, minimum=1, maximum=MAX_PORT),
            management_port=_int(
                env,
                "REGISTRY_MANAGEMENT_PORT",
                REGISTRY_MANAGEMENT_PORT,
                minimum=1,
                maximum=MAX_PORT,
            ),
            heap=env.get(ENV_PREFIX + "REGISTRY_HEAP", "512m").strip() or "512m",
        )
