"""``turnaudit broker start|stop|status``: the project-local Kafka broker."""

from __future__ import annotations

import argparse

from turnaudit.kafka.topics import ensure_topics
from turnaudit.local_broker import LocalKafkaBroker
from turnaudit.settings import KafkaSettings, LocalBrokerSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("broker", help="start, stop or inspect the local Kafka broker")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="format storage once, start, wait until it serves")
    start.add_argument(
        "--no-topics", action="store_true", help="do not create the project's topics"
    )
    start.set_defaults(handler=_start)
    actions.add_parser("stop", help="stop the broker started from this folder").set_defaults(
        handler=_stop
    )
    actions.add_parser("status", help="is it running and serving?").set_defaults(handler=_status)


def _start(args: argparse.Namespace) -> int:
    broker = LocalKafkaBroker(LocalBrokerSettings.from_env())
    status = broker.start()
    print(f"kafka: {status.describe()}")
    if not args.no_topics:
        settings = KafkaSettings.from_env().with_bootstrap(broker.bootstrap_servers)
        created = ensure_topics(settings)
        print(f"topics: {len(created)} created under prefix {settings.topics.prefix!r}")
    return 0


def _stop(_: argparse.Namespace) -> int:
    broker = LocalKafkaBroker(LocalBrokerSettings.from_env())
    broker.stop()
    print(f"kafka: {broker.status().describe()}")
    return 0


def _status(_: argparse.Namespace) -> int:
    status = LocalKafkaBroker(LocalBrokerSettings.from_env()).status()
    print(f"kafka: {status.describe()}")
    return 0 if status.serving else 1
