"""``turnaudit sink logs|metrics|otel``: the consumer services.

Settings come from the environment (``TURNAUDIT_*``, ``KAFKA_BOOTSTRAP_SERVERS``);
the service runs until SIGTERM or SIGINT, then drains and exits 0. With
``--workers N`` (or ``TURNAUDIT_WORKERS``) above 1 it runs as N worker
processes in its consumer group behind one HTTP port
(``turnaudit.consumers.runtime.workers``).
"""

from __future__ import annotations

import argparse

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from turnaudit.argparsing import positive_int
from turnaudit.cluster import connect
from turnaudit.consumers.log_sink import LogSink, service_logging
from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.otel_sink import OtelSink
from turnaudit.consumers.runtime import ConsumerService, Sink, Validation
from turnaudit.consumers.runtime.redelivery import marking_sink
from turnaudit.consumers.runtime.settings import MAX_WORKERS, ServiceName, ServiceSettings
from turnaudit.consumers.runtime.worker_process import (
    ServiceFactory,
    WorkerPlan,
    worker_settings,
)
from turnaudit.consumers.runtime.workers import WorkerSupervisor
from turnaudit.errors import ConfigurationError
from turnaudit.sealing.opening import turn_opener
from turnaudit.settings import check_port_free

WORKERS_HELP = (
    "worker processes, each a member of the service's consumer group with its own "
    f"partitions, behind one HTTP port (default TURNAUDIT_WORKERS or 1; at most {MAX_WORKERS})"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sink", help="run a consumer service (settings from TURNAUDIT_* environment variables)"
    )
    services = parser.add_subparsers(dest="service", metavar="SERVICE", required=True)
    logs = services.add_parser(
        "logs", help="one JSON log line per turn (TURNAUDIT_LOG_FILE, TURNAUDIT_LOG_SURFACES)"
    )
    logs.set_defaults(handler=_logs)
    metrics = services.add_parser(
        "metrics",
        help="Prometheus verdict counters on /metrics (TURNAUDIT_HTTP_PORT); packs and domains "
        "named up to TURNAUDIT_METRICS_LABEL_LIMIT (100), or exactly TURNAUDIT_METRICS_PACKS / "
        "TURNAUDIT_METRICS_DOMAINS",
    )
    metrics.set_defaults(handler=_metrics)
    otel = services.add_parser(
        "otel",
        help="each turn's verdicts as OpenTelemetry log records (gen_ai.evaluation.result) "
        "over OTLP to TURNAUDIT_OTLP_ENDPOINT (TURNAUDIT_OTLP_PROTOCOL grpc or http)",
    )
    otel.set_defaults(handler=_otel)
    for service in (logs, metrics, otel):
        add_workers_argument(service)


def add_workers_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=worker_count, default=None, help=WORKERS_HELP)


def worker_count(text: str) -> int:
    """An argparse ``type``: 1 to ``MAX_WORKERS`` worker processes."""
    value = positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{value} is above {MAX_WORKERS}")
    return value


def service_settings(service: ServiceName, *, own_port: bool = True) -> ServiceSettings:
    settings = ServiceSettings.from_env(service)
    if own_port:  # a worker serves no HTTP: its supervisor holds the port
        check_port_free(settings.http_host, settings.http_port, "TURNAUDIT_HTTP_PORT")
    # A service outlives a cluster outage: it starts even when the cluster does
    # not answer yet, and says so on /readyz and (once, then at a bounded rate) in its log.
    kafka, _ = connect(settings.kafka, start_local=False, require=False)
    return settings.with_kafka(kafka)


def service_registry() -> CollectorRegistry:
    # Process metrics (resident memory, CPU) beside the service's own.
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def _run(service: ConsumerService) -> int:
    service.install_signal_handlers()
    service.run()
    return 0


def run_service(name: ServiceName, factory: ServiceFactory, args: argparse.Namespace) -> int:
    """One process, or a supervisor of ``--workers`` worker processes."""
    settings = service_settings(name)
    workers = args.workers or settings.workers
    if workers > 1 and name is ServiceName.LOG_SINK and settings.log.file is None:
        raise ConfigurationError(
            f"{workers} log sink workers need TURNAUDIT_LOG_FILE (each writes "
            "<name>.worker-<i><suffix>): on one stdout their batches would interleave"
        )
    with service_logging(args.log_level):
        if workers == 1:
            return _run(factory(WorkerPlan(0, False, "", args.log_level), service_registry()))
        supervisor = WorkerSupervisor(
            settings,
            factory,
            workers,
            registry=service_registry(),
            logging_context=service_logging,
            log_level=args.log_level,
            max_workers=MAX_WORKERS,
        )
        supervisor.install_signal_handlers()
        return supervisor.run()


def worker_service_settings(name: ServiceName, plan: WorkerPlan) -> ServiceSettings:
    return worker_settings(service_settings(name, own_port=not plan.supervised), plan)


def consumer_service(
    settings: ServiceSettings,
    sink: Sink,
    plan: WorkerPlan,
    registry: CollectorRegistry,
    *,
    validation: Validation | None = None,
) -> ConsumerService:
    """The one way a service is built: its sink on the consumer runtime (with its own
    ``validation``, else the runtime's). A supervised worker serves no HTTP (its
    supervisor does) and, for a sink of accepted turns, marks the turns another
    worker already delivered (``RedeliveryMarkingSink``), if it takes the marks."""
    if not plan.supervised:
        return ConsumerService(settings, sink, registry=registry, validation=validation)
    marking = None
    if sink.marks_redeliveries:
        sink = marking = marking_sink(sink, settings.kafka.topics.turn_events, plan.metrics_dir)
    service = ConsumerService(
        settings, sink, registry=registry, serve_http=False, validation=validation
    )
    if marking is not None:
        marking.on_marked = service.metrics.redelivered.inc
    return service


def log_sink_worker(plan: WorkerPlan, registry: CollectorRegistry) -> ConsumerService:
    settings = worker_service_settings(ServiceName.LOG_SINK, plan)
    opener = turn_opener(settings.kafka, settings.log.surfaces)  # a bad keyring: one line
    return consumer_service(
        settings, LogSink(settings.log, registry, opener=opener), plan, registry
    )


def verdict_metrics_worker(plan: WorkerPlan, registry: CollectorRegistry) -> ConsumerService:
    settings = worker_service_settings(ServiceName.VERDICT_METRICS, plan)
    return consumer_service(
        settings, VerdictMetricsSink(settings.metrics, registry), plan, registry
    )


def otel_sink_worker(plan: WorkerPlan, registry: CollectorRegistry) -> ConsumerService:
    settings = worker_service_settings(ServiceName.OTEL_SINK, plan)
    return consumer_service(settings, OtelSink(settings.otlp, registry), plan, registry)


def _logs(args: argparse.Namespace) -> int:
    return run_service(ServiceName.LOG_SINK, log_sink_worker, args)


def _metrics(args: argparse.Namespace) -> int:
    return run_service(ServiceName.VERDICT_METRICS, verdict_metrics_worker, args)


def _otel(args: argparse.Namespace) -> int:
    return run_service(ServiceName.OTEL_SINK, otel_sink_worker, args)
