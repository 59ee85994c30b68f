"""``turnaudit acls plan|apply``: least-privilege ACLs for the project's principals.

``plan`` prints them (a table, or JSON) and needs no cluster; ``apply``
creates them as the configured principal (the cluster's super user, or one
allowed to alter ACLs).
"""

from __future__ import annotations

import argparse
import json

from turnaudit.cluster import connect
from turnaudit.kafka.acls import AclRule, apply_acls, check_team, plan_acls
from turnaudit.settings import DEFAULT_TOPIC_PREFIX, ENV_PREFIX, KafkaSettings
from turnaudit.topic_names import check_topic_prefix


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "acls", help="plan or apply the least-privilege ACLs of the project's principals"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    plan = actions.add_parser("plan", help="print which principal may do what (no cluster)")
    apply = actions.add_parser("apply", help="create the planned ACLs on the cluster")
    for sub in (plan, apply):
        sub.add_argument(
            "--prefix",
            default=None,
            help=f"topic prefix (default: {ENV_PREFIX}TOPIC_PREFIX, or {DEFAULT_TOPIC_PREFIX!r})",
        )
        sub.add_argument(
            "--subscriber",
            action="append",
            default=[],
            metavar="TEAM",
            help="also plan read access for principal subscriber-TEAM (its groups: "
            "<prefix>subscriber-TEAM.*); repeatable",
        )
    plan.add_argument("--json", action="store_true", help="one JSON object per line")
    plan.set_defaults(handler=_plan)
    apply.set_defaults(handler=_apply)


def _rules(args: argparse.Namespace) -> list[AclRule]:
    """The plan for the arguments: a prefix or a team name Kafka or the plan cannot
    take is one line (exit 2), before any cluster is asked."""
    if args.prefix is not None:
        prefix = check_topic_prefix(args.prefix, "--prefix")
    else:
        prefix = KafkaSettings.from_env().topics.prefix  # checked as it is read
    for team in args.subscriber:
        check_team(team)
    return plan_acls(prefix, subscribers=args.subscriber)


def _plan(args: argparse.Namespace) -> int:
    rules = _rules(args)
    if args.json:
        for rule in rules:
            print(
                json.dumps(
                    {
                        "principal": f"User:{rule.principal}",
                        "resource": rule.resource,
                        "name": rule.name,
                        "pattern": "prefixed" if rule.prefixed else "literal",
                        "operation": rule.operation,
                        "permission": "allow",
                    }
                )
            )
        return 0
    width = max(len(r.principal) for r in rules) + 5
    print(f"{'principal':<{width}} {'operation':<9} {'resource':<8} name")
    for rule in rules:
        name = f"{rule.name}*" if rule.prefixed else rule.name
        print(f"{'User:' + rule.principal:<{width}} {rule.operation:<9} {rule.resource:<8} {name}")
    print(f"{len(rules)} ACLs; everything else is denied (User:admin is the super user)")
    return 0


def _apply(args: argparse.Namespace) -> int:
    rules = _rules(args)
    settings, where = connect(KafkaSettings.from_env(), start_local=False)
    count = apply_acls(settings.client_config({"log_level": 0}), rules)
    print(f"acls: {count} applied on the {where}")
    return 0
