"""The archive in S3-compatible object storage (boto3): ``s3://bucket/prefix``.

Each file is one object, ``<prefix>/<name>``, put once with ``If-None-Match: *``: the
server refuses the put (412) when the key exists, in one step, so a second writer never
replaces the first one's bytes (a read-then-put could). A refused put reads the object: the
same bytes are success (a segment written again after a restart), other bytes are
``ArchiveConflict``. A put is whole or absent: nothing is half written, so there are no
temporary objects to clear.

Every put carries ``Content-MD5`` (the server checks the body it got). boto3's newer
default checksums (``x-amz-checksum-*``, aws-chunked bodies) are off: S3-compatible servers
refuse them (S3Proxy answers 501), and the archive's digests carry each segment's SHA-256.

Failures are one line: a bucket that does not exist, refused credentials or none are a
wrong setting (``ConfigurationError``, exit 2); a server that does not answer or fails is
``StorageError`` (exit 1).
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from turnaudit.archive.store import ArchiveConflict
from turnaudit.errors import ConfigurationError, StorageError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ListObjectsV2OutputTypeDef

SCHEME = "s3://"
ENDPOINT_ENV = "TURNAUDIT_ARCHIVE_S3_ENDPOINT_URL"
REGION_ENV = "TURNAUDIT_ARCHIVE_S3_REGION"
S3_SETTINGS = (ENDPOINT_ENV, REGION_ENV)
# A refused put (412) and a put racing another conditional put of the key (409: S3 asks
# the client to try again) both end in a read of the key; the 409 is tried again first.
_PRECONDITION_FAILED = 412
_CONDITIONAL_CONFLICT = 409
_PUT_ATTEMPTS = 3
# Not the client's: a wrong setting, named as one.
_WRONG_SETTING = {
    "NoSuchBucket": "no such bucket",
    "AccessDenied": "access denied: check the credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE)",
    "InvalidAccessKeyId": "the access key is not known to the server (AWS_ACCESS_KEY_ID)",
    "SignatureDoesNotMatch": "the secret key does not match (AWS_SECRET_ACCESS_KEY)",
    "InvalidBucketName": "not a valid bucket name",
    "PermanentRedirect": f"the bucket is in another region: set {REGION_ENV}",
    "AuthorizationHeaderMalformed": f"the bucket is in another region: set {REGION_ENV}",
}

T = TypeVar("T")


@dataclass(frozen=True)
class S3Location:
    """``s3://bucket/prefix``: the bucket, and the prefix of every key ('' or ending in /)."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, text: str) -> S3Location:
        if not text.startswith(SCHEME):
            raise ConfigurationError(f"{text}: not an s3:// location")
        bucket, _, prefix = text[len(SCHEME) :].partition("/")
        if not bucket:
            raise ConfigurationError(f"{text}: no bucket: write s3://bucket or s3://bucket/prefix")
        parts = [part for part in prefix.split("/") if part]
        if any(part in (".", "..") for part in parts):
            raise ConfigurationError(f"{text}: '.' and '..' are no key prefix")
        return cls(bucket, "".join(f"{part}/" for part in parts))

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}".rstrip("/")


@dataclass(frozen=True)
class S3Settings:
    """The server (an S3-compatible one's URL; unset: AWS S3) and the region. Credentials
    are boto3's own chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, the
    instance's or task's role."""

    endpoint_url: str | None = None
    region: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Settings:
        env = os.environ if env is None else env
        endpoint = env.get(ENDPOINT_ENV, "").strip() or None
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"{ENDPOINT_ENV}={endpoint!r}: expected an http:// or https:// URL"
            )
        return cls(endpoint, env.get(REGION_ENV, "").strip() or None)

    def client(self, session: boto3.session.Session | None = None) -> S3Client:
        """A client of the server (``session``: boto3's default one, its credential chain)."""
        config = Config(
            # An S3-compatible server is addressed by path (no bucket subdomains to resolve).
            s3={"addressing_style": "path" if self.endpoint_url else "auto"},
            connect_timeout=5,
            read_timeout=60,
            retries={"max_attempts": 4, "mode": "standard"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        return (session or boto3.session.Session()).client(
            "s3", endpoint_url=self.endpoint_url, region_name=self.region, config=config
        )


class S3Archive:
    """An archive under ``location`` in a bucket (names are ``/``-separated, relative to
    the prefix)."""

    def __init__(self, location: S3Location, client: S3Client) -> None:
        self.location = location
        self._client = client

    @classmethod
    def connect(cls, location: S3Location, settings: S3Settings) -> S3Archive:
        """The archive, its bucket asked for first: a wrong bucket, credentials or server
        is one line now, not at the first segment."""
        archive = cls(location, settings.client())
        archive._call("open", "", lambda: archive._client.head_bucket(Bucket=location.bucket))
        return archive

    def __str__(self) -> str:
        return str(self.location)

    def write_once(self, name: str, data: bytes) -> bool:
        """``data`` under ``name``: True when written now, False when the same bytes were
        there already; ``ArchiveConflict`` when other bytes are."""
        digest = hashlib.md5(data, usedforsecurity=False).digest()
        md5 = base64.b64encode(digest).decode("ascii")
        for attempt in range(1, _PUT_ATTEMPTS + 1):
            try:
                self._client.put_object(
                    Bucket=self.location.bucket,
                    Key=self._key(name),
                    Body=data,
                    ContentMD5=md5,
                    IfNoneMatch="*",
                )
                return True
            except ClientError as exc:
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status == _CONDITIONAL_CONFLICT and attempt < _PUT_ATTEMPTS:
                    continue
                if status not in (_PRECONDITION_FAILED, _CONDITIONAL_CONFLICT):
                    raise self._failure("write", name, exc) from None
            except BotoCoreError as exc:
                raise self._failure("write", name, exc) from None
            break
        existing = self.read(name)
        if existing != data:
            raise ArchiveConflict(f"{name} exists already with other content: not replaced")
        return False

    def read(self, name: str) -> bytes | None:
        """The object's bytes, None when there is none."""
        try:
            answer = self._client.get_object(Bucket=self.location.bucket, Key=self._key(name))
            return answer["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise self._failure("read", name, exc) from None
        except BotoCoreError as exc:
            raise self._failure("read", name, exc) from None

    def files(self, folder: str = "") -> list[str]:
        """Every object under ``folder`` (recursively), sorted."""
        base = self._folder(folder)
        pages = self._pages(folder, base)
        # A key ending in / is a folder marker (a console's "create folder"; some servers
        # list their directories so): no file the archive writes ends so.
        found = [
            item["Key"][len(self.location.prefix) :]
            for page in pages
            for item in page.get("Contents", [])
            if not item["Key"].endswith("/")
        ]
        return sorted(found)

    def folders(self, folder: str = "") -> list[str]:
        """The folders right inside ``folder``, sorted (names only): the key prefixes up to
        the next ``/`` (a folder is there while an object is under it)."""
        base = self._folder(folder)
        pages = self._pages(folder, base, folders=True)
        found = [
            common["Prefix"][len(base) :].rstrip("/")
            for page in pages
            for common in page.get("CommonPrefixes", [])
        ]
        return sorted(found)

    def clear_partials(self, older_than_s: float, now: float) -> int:
        """None to clear: a put is whole or absent."""
        return 0

    def _pages(
        self, folder: str, base: str, *, folders: bool = False
    ) -> list[ListObjectsV2OutputTypeDef]:
        """Every page of the listing under ``base`` (``folders``: up to the next ``/``)."""
        paginator = self._client.get_paginator("list_objects_v2")
        bucket = self.location.bucket
        if folders:
            return self._call(
                "list",
                folder,
                lambda: list(paginator.paginate(Bucket=bucket, Prefix=base, Delimiter="/")),
            )
        return self._call(
            "list", folder, lambda: list(paginator.paginate(Bucket=bucket, Prefix=base))
        )

    def _key(self, name: str) -> str:
        return self.location.prefix + name

    def _folder(self, folder: str) -> str:
        return self._key(folder.strip("/") + "/") if folder.strip("/") else self.location.prefix

    def _call(self, action: str, name: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except (BotoCoreError, ClientError) as exc:
            raise self._failure(action, name, exc) from None

    def _failure(self, action: str, name: str, exc: BotoCoreError | ClientError) -> Exception:
        where = f"{self.location}/{name}".rstrip("/") if name else str(self.location)
        if isinstance(exc, NoCredentialsError):
            return ConfigurationError(
                f"{where}: no S3 credentials: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
            )
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in _WRONG_SETTING or (action == "open" and status in (403, 404)):
                reason = _WRONG_SETTING.get(code) or (
                    "no such bucket" if status == 404 else _WRONG_SETTING["AccessDenied"]
                )
                return ConfigurationError(f"{where}: {reason}")
            message = str(error.get("Message", "")) or "no message"
            return StorageError(f"{where}: {action} failed: {code or status}: {message}")
        return StorageError(f"{where}: {action} failed: {exc}")
