"""``turnaudit simulate``: drive the pipeline with a simulated turn runtime."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server

from turnaudit.argparsing import non_negative_int, non_negative_seconds
from turnaudit.cluster import connect, require_access
from turnaudit.contracts import Breach
from turnaudit.errors import ConfigurationError, EventRefusedError
from turnaudit.events import OutgoingTurnEvent
from turnaudit.files import FileModes, private_dir, write_private
from turnaudit.kafka.topics import ensure_topics
from turnaudit.producers.adapter import SHIPPED_SCHEMA_VERSIONS, TurnAuditEmitter
from turnaudit.producers.publisher import CloseReport, TurnEventPublisher
from turnaudit.producers.simulator import TurnRuntimeSimulator
from turnaudit.settings import KafkaSettings
from turnaudit.signing_keys import CheckpointSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate", help="publish simulated turns (deterministic for a seed, rate-controlled)"
    )
    add_simulation_arguments(parser)
    parser.add_argument("--truth", type=Path, help="write the simulator's ground truth (JSON) here")
    parser.add_argument(
        "--real-time",
        action="store_true",
        help="stamp each turn with the wall-clock time it is published (default: the seed's "
        "simulated clock, which starts at the next midnight UTC; the records are stamped with "
        "the time they are published)",
    )
    parser.add_argument(
        "--metrics-port",
        type=non_negative_int,
        metavar="PORT",
        help="serve the runtime's metrics (publisher, spool, contract breaches) on "
        "http://HOST:PORT/metrics while it publishes, as a live runtime does",
    )
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for --metrics-port (default 127.0.0.1)"
    )
    parser.set_defaults(handler=_simulate)


def add_simulation_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=7, help="same seed, same turns (default 7)")
    parser.add_argument(
        "--events", type=non_negative_int, default=3000, help="how many turns (default 3000)"
    )
    parser.add_argument(
        "--rate",
        type=non_negative_int,
        default=0,
        help="events per second; 0 = as fast as possible (default)",
    )
    parser.add_argument("--sessions", type=non_negative_int, default=60, help="concurrent sessions")
    parser.add_argument(
        "--schema-versions",
        type=_versions,
        default=(1, 2, 3),
        help="writer schema versions to mix, e.g. 1,2,3 (default), 4, or weighted "
        "4:6,3,2,1 (a session draws v4 six times as often as each other)",
    )
    parser.add_argument(
        "--close-timeout",
        type=non_negative_seconds,
        default=30.0,
        help="seconds close() waits for the broker to take what is spooled (default 30; "
        "what it did not take stays in the spool for the next publisher)",
    )
    parser.add_argument(
        "--spool-dir",
        type=_spool_dir,
        default=Path("var/spool"),
        help="where undeliverable events wait for the broker",
    )


def _spool_dir(text: str) -> Path:
    """A folder the publisher can write its spool to (created if missing)."""
    path = Path(text)
    try:
        private_dir(path, FileModes())  # 0700 always: the spool holds whole turns
        probe = path / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"{text} is not a writable folder ({exc.strerror}): choose another"
        ) from None
    return path


def _versions(text: str) -> tuple[int, ...]:
    """``1,2,3`` or, weighted, ``4:6,3,2,1``: each version as often as its weight (default
    1), so a session draws v4 six times as often as v3 (the simulator draws from the list)."""
    weights: dict[int, int] = {}
    try:
        for part in (p.strip() for p in text.split(",")):
            if part:
                version, _, weight = part.partition(":")
                weights[int(version)] = weights.get(int(version), 0) + int(weight or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list like 1,2,3 or 4:6,3") from None
    shipped = ", ".join(map(str, SHIPPED_SCHEMA_VERSIONS[:-1]))
    if not weights or not set(weights) <= set(SHIPPED_SCHEMA_VERSIONS):
        raise argparse.ArgumentTypeError(
            f"schema versions {text!r}: shipped are {shipped} and {SHIPPED_SCHEMA_VERSIONS[-1]}"
        )
    if min(weights.values()) < 1:
        raise argparse.ArgumentTypeError(f"schema versions {text!r}: a weight is 1 or more")
    return tuple(v for v in sorted(weights) for _ in range(weights[v]))


def publish_simulation(
    settings: KafkaSettings,
    args: argparse.Namespace,
    *,
    real_time: bool = False,
    checkpoints: CheckpointSettings | None = None,
    registry: CollectorRegistry | None = None,
) -> tuple[TurnRuntimeSimulator, CloseReport, TurnAuditEmitter, float]:
    """Publish ``args.events`` simulated turns through the adapter and one publisher.

    ``real_time``: each turn's ``occurred_at`` is the moment it is published, as
    a live runtime's would be (dashboards' delay panels then read true delays).
    """
    if args.events == 0:
        raise ConfigurationError("--events must be at least 1")
    # The seed's clock runs ahead of the wall clock (simulator.default_start): the
    # publisher caps a record timestamp at now, so the turns are stored as published.
    sim = TurnRuntimeSimulator(
        args.seed, schema_versions=args.schema_versions, concurrent_sessions=max(1, args.sessions)
    )
    publisher = TurnEventPublisher(
        settings, spool_dir=args.spool_dir, checkpoints=checkpoints, registry=registry
    )

    def to_dead_letters(event: OutgoingTurnEvent, breaches: list[Breach]) -> None:
        publisher.dead_letter(
            event, f"contract:{breaches[0].contract.value}", "; ".join(map(str, breaches))
        )

    emitter = TurnAuditEmitter(publisher, to_dead_letters, registry=registry)
    started = time.monotonic()
    interval = 1.0 / args.rate if args.rate else 0.0
    for i, event in enumerate(sim.events(args.events)):
        if interval:
            delay = started + i * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        if real_time:
            event["occurred_at"] = int(time.time() * 1000)  # the adapter's unit: epoch millis
        # A refusal is counted, logged and on the metric by the publisher, and
        # the close report names it: the simulated turn goes on.
        with contextlib.suppress(EventRefusedError):
            emitter.emit(event)
    report = publisher.close(timeout=args.close_timeout)
    return sim, report, emitter, time.monotonic() - started


def _simulate(args: argparse.Namespace) -> int:
    checkpoints = CheckpointSettings.from_env()  # a signing key that will not do fails first
    registry = None
    if args.metrics_port is not None:
        registry = CollectorRegistry()
        try:
            start_http_server(args.metrics_port, addr=args.metrics_host, registry=registry)
        except OSError as exc:
            raise ConfigurationError(
                f"--metrics-port {args.metrics_port}: cannot listen on "
                f"{args.metrics_host}:{args.metrics_port} ({exc.strerror or exc})"
            ) from None
    settings, where = connect(KafkaSettings.from_env(), start_local=False)
    print(where)
    ensure_topics(settings)
    require_access(settings, writes=[settings.topics.turn_events, settings.topics.schemas])
    sim, report, emitter, elapsed = publish_simulation(
        settings, args, real_time=args.real_time, checkpoints=checkpoints, registry=registry
    )
    print(
        f"published {emitter.emitted} turns in {elapsed:.1f}s "
        f"({emitter.emitted / max(elapsed, 1e-9):.0f}/s) to {settings.topics.turn_events}: "
        f"{report.describe()}, {emitter.breached} contract breaches to the DLQ"
    )
    if args.truth:
        write_private(args.truth, json.dumps(sim.truth.as_json(), indent=2).encode())
        print(f"ground truth: {args.truth}")
    return 0 if report.ok else 1
