"""The S3 store's answers to what a server says, one table: every error code that means a
wrong setting is ``ConfigurationError`` (exit 2) naming the location, any other failure
``StorageError`` (exit 1); a conditional put refused (412) reads the object (same bytes:
written already; other bytes: ``ArchiveConflict``); a put racing another (409) is tried
again. The answers are botocore's ``Stubber``: the server's wire behaviour is the broker
tier's (tests/broker/archive/test_s3_store.py, a real server)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from turnaudit.archive.s3_store import S3Archive, S3Location, S3Settings
from turnaudit.archive.store import ArchiveConflict
from turnaudit.cli import describe_failure
from turnaudit.errors import ConfigurationError, StorageError

LOCATION = S3Location.parse("s3://audit-bucket/prod/archive")
NAME = "t/0/segments/00000000000000000000-00000000000000000004.avro"
KEY = LOCATION.prefix + NAME


@pytest.fixture
def stubbed() -> Iterator[tuple[S3Archive, Stubber]]:
    session = boto3.session.Session(aws_access_key_id="k", aws_secret_access_key="s")  # noqa: S106 - never sent
    client = S3Settings("http://127.0.0.1:1", "us-east-1").client(session)
    with Stubber(client) as stubber:
        yield S3Archive(LOCATION, client), stubber
        stubber.assert_no_pending_responses()


def body(data: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(data), len(data))


# (error code, HTTP status, the exception, what its line says)
ANSWERS = [
    ("NoSuchBucket", 404, ConfigurationError, "no such bucket"),
    ("AccessDenied", 403, ConfigurationError, "access denied"),
    ("InvalidAccessKeyId", 403, ConfigurationError, "AWS_ACCESS_KEY_ID"),
    ("SignatureDoesNotMatch", 403, ConfigurationError, "AWS_SECRET_ACCESS_KEY"),
    ("PermanentRedirect", 301, ConfigurationError, "TURNAUDIT_ARCHIVE_S3_REGION"),
    ("InternalError", 500, StorageError, "read failed: InternalError"),
    ("SlowDown", 503, StorageError, "read failed: SlowDown"),
]


@pytest.mark.parametrize(("code", "status", "kind", "said"), ANSWERS)
def test_a_failed_request_is_one_line_a_wrong_setting_exit_2_else_exit_1(
    stubbed: tuple[S3Archive, Stubber], code: str, status: int, kind: type, said: str
) -> None:
    archive, stubber = stubbed
    stubber.add_client_error(
        "get_object", service_error_code=code, service_message="said so", http_status_code=status
    )
    with pytest.raises(kind) as raised:
        archive.read(NAME)
    exit_code, line = describe_failure(raised.value)
    assert exit_code == (2 if kind is ConfigurationError else 1)
    assert said in line
    assert "\n" not in line
    assert str(LOCATION) in line


def test_a_name_never_written_reads_as_none(stubbed: tuple[S3Archive, Stubber]) -> None:
    archive, stubber = stubbed
    stubber.add_client_error("get_object", service_error_code="NoSuchKey", http_status_code=404)
    assert archive.read(NAME) is None


@pytest.mark.parametrize(
    ("there", "written", "outcome"),
    [(b"segment", b"segment", False), (b"segment", b"another", ArchiveConflict)],
)
def test_a_refused_put_reads_the_object_same_bytes_written_already_other_a_conflict(
    stubbed: tuple[S3Archive, Stubber], there: bytes, written: bytes, outcome: object
) -> None:
    archive, stubber = stubbed
    stubber.add_client_error(
        "put_object", service_error_code="PreconditionFailed", http_status_code=412
    )
    stubber.add_response(
        "get_object", {"Body": body(there)}, {"Bucket": LOCATION.bucket, "Key": KEY}
    )
    if outcome is ArchiveConflict:
        with pytest.raises(ArchiveConflict, match=NAME):
            archive.write_once(NAME, written)
    else:
        assert archive.write_once(NAME, written) is outcome


def test_a_put_racing_another_is_tried_again(stubbed: tuple[S3Archive, Stubber]) -> None:
    archive, stubber = stubbed
    stubber.add_client_error(
        "put_object", service_error_code="ConditionalRequestConflict", http_status_code=409
    )
    stubber.add_response("put_object", {}, None)
    assert archive.write_once(NAME, b"segment") is True


def test_every_put_is_conditional_and_carries_its_md5(
    stubbed: tuple[S3Archive, Stubber],
) -> None:
    archive, stubber = stubbed
    stubber.add_response(
        "put_object",
        {},
        {
            "Bucket": LOCATION.bucket,
            "Key": KEY,
            "Body": b"segment",
            "IfNoneMatch": "*",
            "ContentMD5": "/dMrkGFoHttSxVS9m78HEg==",  # base64 of MD5(b"segment")
        },
    )
    assert archive.write_once(NAME, b"segment") is True
