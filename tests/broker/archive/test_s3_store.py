"""The archive on S3, against a real S3 server on loopback (S3Proxy, started once for the
module: tests/support/s3_server.py). The store contract (tests/support/store_contract.py)
holds as it does for the local directory; ``archive check s3://…`` names an object
changed, removed or added behind the archive's back; wrong credentials or bucket are one
line and exit 2. Then the whole path on the real broker: turns published, ``archive run``
into ``s3://``, ``archive check`` clean, every partition deleted (``delete_records``), and
``verify --archive s3://…`` finds every turn, 0 lost; ``replay --archive`` and ``archive
export`` read every turn from it."""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.archive import archive_records, archived_offsets, signing_key
from tests.support.s3_server import S3Server, s3proxy
from tests.support.services import service_env, turnaudit_process
from tests.support.store_contract import CONTRACT, OBJECTS, Clause
from tests.support.verify_helpers import publish
from turnaudit.archive.segments import ArchivedRecord
from turnaudit.archive.writer import ArchivePolicy
from turnaudit.checkpoints import keyring_entry_toml
from turnaudit.cli import main
from turnaudit.kafka.admin import new_admin
from turnaudit.kafka.offsets import end_offsets, watermarks
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import generate_keys

pytestmark = pytest.mark.broker

KEY = signing_key()
TOPIC = "t.turn-events"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3proxy(tmp_path_factory.mktemp("s3proxy")) as running:
        yield running


@pytest.fixture(scope="module")
def bucket(server: S3Server) -> str:
    return server.new_bucket()


@pytest.fixture
def s3_env(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The server's settings in this process's environment (the CLI reads them)."""
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    return server


def fresh_location(bucket: str) -> str:
    return f"s3://{bucket}/{uuid.uuid4().hex[:12]}/archive"


@pytest.mark.parametrize(("clause", "check"), CONTRACT, ids=[name for name, _ in CONTRACT])
@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(objects=OBJECTS, other=st.binary(max_size=64))
def test_s3_keeps_the_store_contract_on_a_real_server(
    *,
    server: S3Server,
    bucket: str,
    clause: str,
    check: Clause,
    objects: dict[str, bytes],
    other: bytes,
) -> None:
    check(server.archive(fresh_location(bucket)), objects, other)


def built(server: S3Server, bucket: str, tmp_path: Path) -> tuple[str, Path, list[str]]:
    """An archive on S3 as the archiver leaves it (5 records, 3 segments, 2 digests), its
    keyring, and its segments' names."""
    location = fresh_location(bucket)
    archive = server.archive(location)
    records = [ArchivedRecord(TOPIC, 0, o, 1000 * o, 1, None, b"v%d" % o) for o in range(5)]
    archive_records(archive, records, KEY, ArchivePolicy(window_ms=2000))
    keyring = tmp_path / "keyring.toml"
    keyring.write_text(
        keyring_entry_toml(KEY.key_id, KEY.public_pem(), datetime(2020, 1, 1, tzinfo=UTC))
    )
    return location, keyring, archive.files(f"{TOPIC}/0/segments")


def _key(location: str, name: str) -> str:
    return location.removeprefix("s3://").split("/", 1)[1] + "/" + name


# What is done to the archive's objects behind its back, and the finding check names.
CHANGES: list[tuple[str, str, Callable[[bytes], bytes | None]]] = [
    ("altered", "segment", lambda data: data[:-1] + bytes([data[-1] ^ 1])),
    ("missing", "segment", lambda data: None),
    ("extra", "new", lambda data: b"not listed by any digest"),
]


@pytest.mark.usefixtures("s3_env")
@pytest.mark.parametrize(("finding", "target", "change"), CHANGES, ids=[c[0] for c in CHANGES])
def test_check_of_s3_names_an_object_changed_removed_or_added_behind_its_back(
    *,
    server: S3Server,
    bucket: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    finding: str,
    target: str,
    change: Callable[[bytes], bytes | None],
) -> None:
    location, keyring, segments = built(server, bucket, tmp_path)
    assert main(["archive", "check", location, "--keyring", str(keyring)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{TOPIC}/0: 5 records in 3 segments (offsets 0-4), 2 digests"
    ]
    client = server.client()
    name = segments[1] if target == "segment" else f"{TOPIC}/0/segments/x.avro"
    before = server.archive(location).read(segments[1]) or b""
    after = change(before)
    bucket_name = location.removeprefix("s3://").split("/", 1)[0]
    if after is None:
        client.delete_object(Bucket=bucket_name, Key=_key(location, name))
    else:  # an unconditional put: what a writer with the bucket's credentials can do
        client.put_object(Bucket=bucket_name, Key=_key(location, name), Body=after)
    assert main(["archive", "check", location, "--keyring", str(keyring)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"{finding} {name}") for line in lines), lines
    assert lines[-1] == "1 findings"


@pytest.mark.usefixtures("s3_env")
@pytest.mark.parametrize(
    ("wrong", "said"),
    [
        ("secret", "access denied: check the credentials"),
        ("bucket", "no such bucket"),
    ],
)
def test_wrong_credentials_or_bucket_on_a_real_server_are_one_line_and_exit_2(
    *,
    server: S3Server,
    bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    wrong: str,
    said: str,
) -> None:
    location = fresh_location(bucket)
    if wrong == "secret":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    else:
        location = f"s3://no-such-{uuid.uuid4().hex[:8]}/archive"
    code = main(["archive", "check", location, "--keyring", str(tmp_path / "k.toml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, len(err)) == (2, 1), err
    assert said in err[0]


def test_archive_run_into_s3_then_verify_from_it_after_deletion_loses_nothing(
    *,
    server: S3Server,
    bucket: str,
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings_ = kafka_settings
    topic = settings_.topics.turn_events
    publish(settings_, tmp_path / "spool", seed=17, events=300)
    ends = end_offsets(settings_, topic)
    archiver_key = generate_keys(tmp_path / "keys", "archiver-1")
    keyring = tmp_path / "keyring.toml"
    keyring.write_text(
        keyring_entry_toml(
            "archiver-1",
            archiver_key.public_path.read_text(),
            datetime(2020, 1, 1, tzinfo=UTC),
        )
    )
    location = fresh_location(bucket)
    env = service_env(
        settings_,
        f"{settings_.topics.prefix}archive",
        **server.env(),
        TURNAUDIT_ARCHIVE_DIR=location,
        TURNAUDIT_ARCHIVE_KEY_FILE=str(archiver_key.private_path),
        TURNAUDIT_ARCHIVE_KEY_ID="archiver-1",
        # One-second windows cut as soon as they end: the partitions' ends are written
        # while the archiver runs.
        TURNAUDIT_ARCHIVE_WINDOW_S="1",
        TURNAUDIT_ARCHIVE_SEAL_GRACE_S="0",
        TURNAUDIT_ARCHIVE_DIGEST_INTERVAL_S="0.5",
    )
    port = int(env["TURNAUDIT_HTTP_PORT"])
    log = tmp_path / "archiver.log"
    with turnaudit_process(["archive", "run"], env, log) as archiver:
        deadline = time.monotonic() + 60
        while archived_offsets(port) != {p: end - 1 for p, end in ends.items()}:
            assert archiver.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        archiver.send_signal(signal.SIGTERM)  # a clean stop: the last digests
        assert archiver.wait(60) == 0, log.read_text()[-3000:]

    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert main(["archive", "check", location, "--keyring", str(keyring)]) == 0
    out = capsys.readouterr().out
    assert sum(int(line.split()[1]) for line in out.splitlines()) == 300

    # Past retention: every partition deleted to its end.
    admin = new_admin(settings_.client_config())
    deletions = [TopicPartition(topic, p, end) for p, end in ends.items()]
    for future in admin.delete_records(deletions).values():
        future.result(30)
    assert watermarks(settings_, topic).low == ends
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", settings_.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", settings_.topics.prefix)
    capsys.readouterr()
    code = main(["verify", "--json", "--archive", location])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["lost"], report["unexplained"]) == (0, 0, [])
    assert report["counts"]["turns"] == 300
    # The topic alone holds none of them any more.
    main(["verify", "--json"])
    assert json.loads(capsys.readouterr().out)["counts"]["turns"] == 0
    # replay and export read the same s3:// location: every turn, decoded, once.
    replayed, exported = tmp_path / "replayed.jsonl", tmp_path / "exported.jsonl"
    assert main(["replay", "--archive", location, "--into", f"jsonl:{replayed}"]) == 0
    assert main(["archive", "export", location, "--jsonl", str(exported)]) == 0
    for written in (replayed, exported):
        lines = [json.loads(line) for line in written.read_text().splitlines()]
        assert len({(line["partition"], line["offset"]) for line in lines}) == 300
        assert all("event" in line for line in lines)
