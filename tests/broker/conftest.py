"""The broker tier: every test here carries the ``broker`` mark (the root conftest checks)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.clusters import SecuredCluster, secured_cluster


@pytest.fixture(scope="session")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    """One secured local cluster for the session's secured tests (each module plans its
    own prefix on it), started with its java and keytool calls watched."""
    with secured_cluster(tmp_path_factory.mktemp("secured")) as cluster:
        yield cluster
