"""``turnaudit schemas check|show``."""

from __future__ import annotations

import argparse

from turnaudit.serialization.compatibility import check_full_transitive
from turnaudit.serialization.schemas import schema_path, shipped_catalog


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("schemas", help="the shipped Avro schemas")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check", help="prove every shipped version FULL_TRANSITIVE compatible, with real records"
    )
    check.add_argument("--records", type=int, default=300, help="records written per version")
    check.set_defaults(handler=_check)
    actions.add_parser("list", help="versions, fingerprints and files").set_defaults(handler=_list)


def _check(args: argparse.Namespace) -> int:
    catalog = shipped_catalog()
    results = check_full_transitive(catalog, args.records)
    for r in results:
        print(f"written with v{r.writer}, read with v{r.reader}: {r.records} records equal")
    print(f"FULL_TRANSITIVE: all {len(catalog.versions)} versions read each other's data")
    return 0


def _list(_: argparse.Namespace) -> int:
    for s in shipped_catalog().versions:
        print(f"v{s.version}  fingerprint {s.fingerprint_hex}  {schema_path(s.name, s.version)}")
    return 0
