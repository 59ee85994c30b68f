"""``turnaudit broker start|stop|status|kill``: the project-local Kafka broker or cluster."""

from __future__ import annotations

import argparse
from dataclasses import replace

from turnaudit.cluster import local_broker
from turnaudit.errors import ConfigurationError
from turnaudit.kafka.acls import apply_acls, plan_acls
from turnaudit.kafka.producer import check_passthrough_options
from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LOCAL_SUBSCRIBERS, LocalBrokerSettings, LocalKafkaBroker
from turnaudit.local_broker.settings import BROKER_NODE_COUNTS, BROKER_SECURITY
from turnaudit.settings import KafkaSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "broker", help="start, stop or inspect the local Kafka broker (one node or three)"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="format storage once, start, wait until it serves")
    start.add_argument(
        "--no-topics", action="store_true", help="do not create the project's topics"
    )
    start.add_argument(
        "--nodes",
        type=int,
        choices=BROKER_NODE_COUNTS,
        default=None,
        help="1, or 3 KRaft nodes on loopback (default TURNAUDIT_BROKER_NODES, 1)",
    )
    start.add_argument(
        "--security",
        choices=BROKER_SECURITY,
        default=None,
        help="sasl_ssl: SCRAM-SHA-512 over TLS, ACLs enforced, the planned ACLs applied "
        "(default TURNAUDIT_BROKER_SECURITY, plaintext)",
    )
    start.set_defaults(handler=_start)
    actions.add_parser("stop", help="stop the broker started from this folder").set_defaults(
        handler=_stop
    )
    actions.add_parser("status", help="is it running and serving?").set_defaults(handler=_status)
    kill = actions.add_parser("kill", help="SIGKILL one node of the cluster (failover drills)")
    kill.add_argument("node", type=int, metavar="NODE_ID")
    kill.set_defaults(handler=_kill)
    restart = actions.add_parser("start-node", help="start one stopped node again")
    restart.add_argument("node", type=int, metavar="NODE_ID")
    restart.set_defaults(handler=_start_node)


def _start(args: argparse.Namespace) -> int:
    settings = LocalBrokerSettings.from_env()
    chosen = {
        **({"nodes": args.nodes} if args.nodes is not None else {}),
        **({"security": args.security} if args.security is not None else {}),
    }
    broker = LocalKafkaBroker(replace(settings, **chosen))
    status = broker.start()
    print(f"kafka: {status.describe()}")
    kafka = KafkaSettings.from_env().with_bootstrap(broker.bootstrap_servers)
    check_passthrough_options(kafka)
    if broker.settings.secured:
        kafka = kafka.with_security(broker.security())  # the admin: topics and ACLs
        count = apply_acls(
            kafka.client_config({"log_level": 0}),
            plan_acls(kafka.topics.prefix, subscribers=LOCAL_SUBSCRIBERS),
        )
        print(
            f"acls: {count} applied for prefix {kafka.topics.prefix!r}; passwords in "
            f"{broker.secrets_dir}, CA certificate {broker.ca_file}"
        )
    if not args.no_topics:
        created = ensure_topics(kafka)
        print(f"topics: {len(created)} created under prefix {kafka.topics.prefix!r}")
    return 0


def _stop(_: argparse.Namespace) -> int:
    broker = local_broker()
    broker.stop()
    print(f"kafka: {broker.status().describe()}")
    return 0


def _status(_: argparse.Namespace) -> int:
    status = local_broker().status()
    print(f"kafka: {status.describe()}")
    return 0 if status.serving else 1


def _kill(args: argparse.Namespace) -> int:
    broker = local_broker()
    if len(broker.node_ids) == 1:
        raise ConfigurationError("broker kill is for a cluster of 3 nodes: use broker stop")
    pid = broker.kill_node(args.node)
    print(f"kafka: node {args.node} (pid {pid}) killed; {broker.status().describe()}")
    return 0


def _start_node(args: argparse.Namespace) -> int:
    broker = local_broker()
    broker.start_node(args.node)
    print(f"kafka: {broker.status().describe()}")
    return 0
