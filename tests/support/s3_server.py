"""A real S3 server on loopback for the broker tier: S3Proxy 3.0.0 (deploy/s3proxy/, its
jars resolved by ``make s3proxy``) with the ``filesystem-nio2`` backend in a temporary
folder (the older ``filesystem`` one lists its directories as objects), SigV4
credentials, on a free port of 127.0.0.1.

It answers ``PutObject`` with ``If-None-Match: *`` by 412 when the key exists (S3Proxy
before 3.0 replaced the object): the archive's write-once rule rests on that. Starting it
FAILS the test (never skips) when the jars are missing, java is missing, or the server
does not answer within ``START_TIMEOUT_S``; its log is in the failure."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.support import PROJECT_ROOT
from turnaudit.archive.s3_store import ENDPOINT_ENV, REGION_ENV, S3Archive, S3Location, S3Settings
from turnaudit.local_broker import free_ports

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

S3PROXY_DIR = PROJECT_ROOT / "deploy/s3proxy"
JARS = S3PROXY_DIR / "target/jars"
START_TIMEOUT_S = 60.0
REGION = "us-east-1"
ACCESS_KEY = "turnaudit-test"
SECRET_KEY = "turnaudit-test-secret"  # noqa: S105 - the throwaway test server's own


@dataclass(frozen=True)
class S3Server:
    """A running server: where it listens and the credentials it takes."""

    endpoint: str
    log: Path

    def env(self, *, secret: str = SECRET_KEY) -> dict[str, str]:
        """The settings a turnaudit process reaches it with (``secret``: another to be
        refused)."""
        return {
            ENDPOINT_ENV: self.endpoint,
            REGION_ENV: REGION,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": secret,
        }

    def client(self) -> S3Client:
        """A client of the server's own, to change objects behind the archive's back."""
        session = boto3.session.Session(
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY
        )
        return S3Settings(self.endpoint, REGION).client(session)

    def new_bucket(self) -> str:
        name = f"archive-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    def archive(self, location: str) -> S3Archive:
        """The S3 store at ``location`` (``s3://bucket/prefix``) on this server."""
        return S3Archive(S3Location.parse(location), self.client())


def _properties(port: int, data: Path) -> str:
    return "\n".join(
        (
            f"s3proxy.endpoint=http://127.0.0.1:{port}",
            "s3proxy.authorization=aws-v4",
            f"s3proxy.identity={ACCESS_KEY}",
            f"s3proxy.credential={SECRET_KEY}",
            "jclouds.provider=filesystem-nio2",
            f"jclouds.filesystem.basedir={data}",
            "",
        )
    )


def _answers(server: S3Server) -> bool:
    try:
        server.client().list_buckets()
    except (BotoCoreError, ClientError):
        return False
    return True


@contextmanager
def s3proxy(home: Path) -> Iterator[S3Server]:
    """S3Proxy serving ``home/data``, stopped (and its folder left) at the end."""
    if not (JARS / ".resolved").exists():
        pytest.fail(f"S3Proxy's jars are not in {JARS}: run `make s3proxy`")
    java = shutil.which("java")
    if java is None:
        pytest.fail("java not found: S3Proxy needs a Java 17+ runtime")
    data = home / "data"
    data.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    properties = home / "s3proxy.properties"
    properties.write_text(_properties(port, data))
    log = home / "s3proxy.log"
    server = S3Server(f"http://127.0.0.1:{port}", log)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                java,
                "-Xmx256m",
                # Started once per module: the JIT's first tier is enough for a test's load.
                "-XX:TieredStopAtLevel=1",
                "-XX:+UseSerialGC",
                f"-Dlogback.configurationFile={S3PROXY_DIR / 'logback.xml'}",
                "-cp",
                f"{JARS}/*",
                "org.gaul.s3proxy.Main",
                "--properties",
                str(properties),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(server):
            if process.poll() is not None or time.monotonic() > deadline:
                said = log.read_text(errors="replace")[-2000:]
                pytest.fail(
                    f"S3Proxy did not answer on {server.endpoint} "
                    f"(exit {process.poll()}); its log:\n{said}"
                )
            time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
