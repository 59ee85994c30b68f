"""``turnaudit topics create``: the project's topics, without the local broker.

For a cluster that is still starting (docker compose), ``--wait`` retries
until it answers.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from turnaudit.cluster import connect
from turnaudit.errors import AccessDeniedError, BrokerError, ConfigurationError
from turnaudit.kafka.errors import ClientException
from turnaudit.kafka.topics import ensure_topics
from turnaudit.settings import KafkaSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("topics", help="create the project's topics on a cluster")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create the topics that do not exist yet")
    create.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for the cluster to answer, asking every second "
        "(default 0: the connect timeout, TURNAUDIT_CONNECT_TIMEOUT_S, 10 s)",
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=None,
        metavar="N",
        help="replicas of every topic (default TURNAUDIT_TOPIC_REPLICATION_FACTOR, else 3 on a "
        "cluster of 3 brokers or more, 1 on a smaller one)",
    )
    create.add_argument(
        "--min-insync-replicas",
        type=int,
        default=None,
        metavar="M",
        help="replicas an acks=all write needs (default TURNAUDIT_TOPIC_MIN_INSYNC_REPLICAS, "
        "else 2 with 3 replicas, 1 with 1)",
    )
    create.add_argument(
        "--allow-unsafe",
        action="store_true",
        help="accept replication factor 1 on a multi-broker cluster, or min.insync.replicas "
        "equal to the replication factor",
    )
    create.set_defaults(handler=_create)


def _create(args: argparse.Namespace) -> int:
    if args.wait < 0:
        raise ConfigurationError(f"--wait {args.wait:g}: give 0 or more seconds")
    for flag, value in (
        ("--replication-factor", args.replication_factor),
        ("--min-insync-replicas", args.min_insync_replicas),
    ):
        if value is not None and value < 1:
            raise ConfigurationError(f"{flag} {value}: give 1 or more")
    deadline = time.monotonic() + args.wait
    # With --wait, the cluster gets that long to answer (asked every second);
    # without, the connect timeout (TURNAUDIT_CONNECT_TIMEOUT_S, 10 s).
    settings, where = connect(KafkaSettings.from_env(), start_local=False, wait=args.wait or None)
    settings = replace(
        settings,
        replication_factor=args.replication_factor or settings.replication_factor,
        min_insync_replicas=args.min_insync_replicas or settings.min_insync_replicas,
    )
    while True:
        try:
            created = ensure_topics(settings, allow_unsafe=args.allow_unsafe, strict=True)
            break
        except AccessDeniedError:
            raise  # asking again changes nothing
        except (BrokerError, ClientException) as exc:
            if time.monotonic() >= deadline:
                raise BrokerError(f"{where}: {exc}") from exc
            time.sleep(1.0)
    print(
        f"topics: {len(created)} created under prefix {settings.topics.prefix!r}"
        + (f": {', '.join(created)}" if created else "")
    )
    return 0
