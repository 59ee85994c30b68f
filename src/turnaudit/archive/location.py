"""An archive LOCATION opened as its store: ``s3://bucket/prefix`` is the S3 store
(``turnaudit.archive.s3_store``, its settings from ``TURNAUDIT_ARCHIVE_S3_*``), anything
else a local directory. Every command that takes a LOCATION opens it here, so each takes
both the same way (docs/archive.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from turnaudit.archive.s3_store import SCHEME, S3Archive, S3Location, S3Settings
from turnaudit.archive.store import ArchiveStore, LocalArchive
from turnaudit.errors import ConfigurationError


def is_object_storage(location: str) -> bool:
    return location.startswith(SCHEME)


def open_archive(
    location: str,
    *,
    label: str = "",
    create: bool = False,
    env: Mapping[str, str] | None = None,
) -> ArchiveStore:
    """The store at ``location``. A directory must exist unless ``create`` (the archiver
    makes its own); a bucket must exist either way (its retention is the operator's to set
    when it is made). A wrong location is ``ConfigurationError`` naming it after
    ``label`` (the flag it came from); a server that does not answer, ``StorageError``."""
    named = f"{label} {location}" if label else location
    if is_object_storage(location):
        try:
            where = S3Location.parse(location)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{label} {exc}" if label else str(exc)) from None
        return S3Archive.connect(where, S3Settings.from_env(os.environ if env is None else env))
    if "://" in location:
        raise ConfigurationError(
            f"{named}: not an archive location: give a directory or s3://bucket/prefix"
        )
    if not location.strip():
        raise ConfigurationError(f"{label or 'LOCATION'}: empty: give a directory or s3://…")
    path = Path(location)
    if not create and not path.is_dir():
        raise ConfigurationError(f"{named}: not a directory")
    if create and path.exists() and not path.is_dir():
        raise ConfigurationError(f"{named}: not a directory")
    return LocalArchive(path)
