"""``turnaudit sink logs|metrics``: the consumer services.

Settings come from the environment (``TURNAUDIT_*``, ``KAFKA_BOOTSTRAP_SERVERS``);
the service runs until SIGTERM or SIGINT, then drains and exits 0.
"""

from __future__ import annotations

import argparse

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from turnaudit.cluster import connect
from turnaudit.consumers.log_sink import LogSinkService, service_logging
from turnaudit.consumers.metrics import VerdictMetricsService
from turnaudit.consumers.runtime import ConsumerService
from turnaudit.consumers.settings import ServiceName, ServiceSettings
from turnaudit.settings import check_port_free


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sink", help="run a consumer service (settings from TURNAUDIT_* environment variables)"
    )
    services = parser.add_subparsers(dest="service", metavar="SERVICE", required=True)
    services.add_parser(
        "logs", help="one JSON log line per turn (TURNAUDIT_LOG_FILE, TURNAUDIT_LOG_SURFACES)"
    ).set_defaults(handler=_logs)
    services.add_parser(
        "metrics",
        help="Prometheus verdict counters on /metrics (TURNAUDIT_HTTP_PORT); packs and domains "
        "named up to TURNAUDIT_METRICS_LABEL_LIMIT (100), or exactly TURNAUDIT_METRICS_PACKS / "
        "TURNAUDIT_METRICS_DOMAINS",
    ).set_defaults(handler=_metrics)


def service_settings(service: ServiceName) -> ServiceSettings:
    settings = ServiceSettings.from_env(service)
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


def _logs(args: argparse.Namespace) -> int:
    settings = service_settings(ServiceName.LOG_SINK)
    with service_logging(args.log_level):
        return _run(LogSinkService(settings, registry=service_registry()))


def _metrics(args: argparse.Namespace) -> int:
    settings = service_settings(ServiceName.VERDICT_METRICS)
    with service_logging(args.log_level):
        return _run(VerdictMetricsService(settings, registry=service_registry()))
