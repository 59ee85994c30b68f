"""The secured cluster's security material: every principal's password, drawn once into
``secrets/<user>.password`` (mode 0600), and the CA and broker certificate made with the
JDK's keytool into ``tls/``. No password is ever put on a command line."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from turnaudit.errors import BrokerError
from turnaudit.kafka.acls import ADMIN_PRINCIPAL, principals
from turnaudit.local_broker.jvm import require_tool

# Principals of the local secured cluster besides the planned ones: one
# subscriber team, so the subscriber's path can be tried locally.
LOCAL_SUBSCRIBERS = ("demo",)


def users() -> list[str]:
    """The SCRAM users of the secured cluster: the admin, then the planned principals."""
    return [ADMIN_PRINCIPAL, *principals(LOCAL_SUBSCRIBERS)]


def password(secrets_dir: Path, user: str) -> str:
    """The user's password, drawn once and kept in a file only its owner reads."""
    path = secrets_dir / f"{user}.password"
    if path.exists():
        return path.read_text().strip()
    secrets_dir.mkdir(parents=True, exist_ok=True)
    secrets_dir.chmod(0o700)
    value = secrets.token_hex(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(value + "\n")
    return value


def ensure_tls(tls_dir: Path, ca_file: Path, store_password_file: Path) -> None:
    """A CA and a broker certificate (127.0.0.1, localhost) signed by it, made
    with keytool once; clients trust ``tls/ca.pem``. keytool reads the stores'
    password from ``store_password_file`` (``-storepass:file``): never on its
    command line, which any local user may read."""
    if (tls_dir / "broker.p12").exists() and ca_file.exists():
        return
    keytool = require_tool(
        "keytool", "a Java 17+ runtime's keytool (apt-get install openjdk-17-jre-headless)"
    )
    tls_dir.mkdir(parents=True, exist_ok=True)
    tls_dir.chmod(0o700)
    ca_store = tls_dir / "ca.p12"
    broker_store = tls_dir / "broker.p12"
    csr = tls_dir / "broker.csr"
    broker_pem = tls_dir / "broker.pem"
    for stale in (ca_store, broker_store, csr, broker_pem, ca_file, tls_dir / "truststore.p12"):
        stale.unlink(missing_ok=True)
    common = [
        "-storetype",
        "PKCS12",
        "-storepass:file",
        str(store_password_file),
        "-keypass:file",
        str(store_password_file),
    ]
    steps: list[list[str]] = [
        [
            "-genkeypair",
            "-alias",
            "ca",
            "-keyalg",
            "RSA",
            "-keysize",
            "2048",
            "-dname",
            "CN=turnaudit local CA",
            "-ext",
            "bc:c",
            "-validity",
            "3650",
            "-keystore",
            str(ca_store),
            *common,
        ],
        [
            "-exportcert",
            "-rfc",
            "-alias",
            "ca",
            "-keystore",
            str(ca_store),
            "-file",
            str(ca_file),
            *common,
        ],
        [
            "-genkeypair",
            "-alias",
            "broker",
            "-keyalg",
            "RSA",
            "-keysize",
            "2048",
            "-dname",
            "CN=localhost",
            "-validity",
            "3650",
            "-keystore",
            str(broker_store),
            *common,
        ],
        [
            "-certreq",
            "-alias",
            "broker",
            "-keystore",
            str(broker_store),
            "-file",
            str(csr),
            *common,
        ],
        [
            "-gencert",
            "-alias",
            "ca",
            "-keystore",
            str(ca_store),
            "-infile",
            str(csr),
            "-outfile",
            str(broker_pem),
            "-rfc",
            "-validity",
            "3650",
            "-ext",
            "SAN=ip:127.0.0.1,dns:localhost",
            "-ext",
            "KU=digitalSignature,keyEncipherment",
            "-ext",
            "EKU=serverAuth,clientAuth",
            *common,
        ],
        [
            "-importcert",
            "-noprompt",
            "-alias",
            "ca",
            "-file",
            str(ca_file),
            "-keystore",
            str(broker_store),
            *common,
        ],
        [
            "-importcert",
            "-noprompt",
            "-alias",
            "broker",
            "-file",
            str(broker_pem),
            "-keystore",
            str(broker_store),
            *common,
        ],
        [
            "-importcert",
            "-noprompt",
            "-alias",
            "ca",
            "-file",
            str(ca_file),
            "-keystore",
            str(tls_dir / "truststore.p12"),
            *common,
        ],
    ]
    for step in steps:
        result = subprocess.run([keytool, *step], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BrokerError(
                f"keytool {step[0]} failed: {' '.join((result.stdout + result.stderr).split())}"
            )
