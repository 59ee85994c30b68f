"""The metric sample names the services really export, from their own metric objects."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from turnaudit.commands.sink import service_registry
from turnaudit.consumers.archive import ArchiveMetrics
from turnaudit.consumers.htir_feeder import HtirFeederSink
from turnaudit.consumers.log_sink import LogSink
from turnaudit.consumers.metrics import VerdictMetricsSink
from turnaudit.consumers.runtime import ConsumerMetrics
from turnaudit.consumers.runtime.settings import LogSinkSettings, MetricsSettings
from turnaudit.consumers.verify_follow_metrics import FollowMetrics
from turnaudit.producers.metrics import BreachMetrics, PublisherMetrics
from turnaudit.settings import KafkaSettings

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}
# A PromQL identifier that is not a function, keyword or label (labels sit inside braces).
_METRIC = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")
_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "le",
    "inf",
    "nan",
}


def exported_sample_names() -> set[str]:
    registry: CollectorRegistry = service_registry()
    ConsumerMetrics(registry)
    VerdictMetricsSink(MetricsSettings(), registry)
    LogSink(LogSinkSettings(), registry)
    # Its producer is created and never flushed: nothing waits for this address
    # (and librdkafka does not log its connection attempts).
    nowhere = KafkaSettings(bootstrap_servers="127.0.0.1:9", client_options={"log_level": "0"})
    HtirFeederSink(nowhere, registry=registry)
    FollowMetrics(registry)  # verify --follow
    ArchiveMetrics(registry)  # archive run
    PublisherMetrics(registry)  # the runtimes' side, scraped from each runtime
    BreachMetrics(registry, max_packs=100)  # the runtimes' adapter
    names: set[str] = {"up", "ALERTS"}  # series Prometheus itself makes
    for family in registry.collect():
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
        names.update(sample.name for sample in family.samples)
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads (label matchers and durations removed)."""
    bare = re.sub(r"\{[^}]*\}", "", expr)
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    bare = re.sub(r'"[^"]*"', "", bare)
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", bare)
    return {
        name
        for name in _METRIC.findall(bare)
        if name.lower() not in _PROMQL_WORDS and not name[0].isdigit()
    }
