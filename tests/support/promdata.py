"""A real Prometheus over known series, for queries that need no running service.

The series are the ones the promtool rule tests (deploy/prometheus/tests/*.yml) feed the
rules, each test group shifted to its own stretch of time, plus any extra series a test
adds; ``promtool tsdb create-blocks-from openmetrics`` writes them into a TSDB and Debian's
Prometheus serves it on a loopback port (no scraping, no rules). Queries run at the
group's own times, so the alert rule tests' ``eval_time`` moments can be asked about with
any query, such as the Grafana rules'.
"""

from __future__ import annotations

import re
import subprocess
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import PROJECT_ROOT
from tests.support.realparts import binary, free_port, http_json, process, wait_until_answering

RULE_TESTS = sorted((PROJECT_ROOT / "deploy/prometheus/tests").glob("*.yml"))
BASE = 1_700_000_000  # seconds; group i starts at BASE + i * GROUP_SPAN
GROUP_SPAN = 6 * 3600  # longer than any window or offset a rule looks back over


def seconds(duration: str) -> int:
    total = 0
    for amount, unit in re.findall(r"(\d+)([smhd])", duration):
        total += int(amount) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    return total


def expand(values: str) -> list[float | None]:
    """promtool's series notation: ``a+bxn``, ``a-bxn``, ``axn``, ``_``, ``_xn``, numbers."""
    out: list[float | None] = []
    for item in str(values).split():
        if item.startswith("_"):
            out.extend([None] * (int(item[2:]) if "x" in item else 1))
            continue
        match = re.fullmatch(r"(-?[\d.e+]+?)(?:([+-])([\d.]+))?x(\d+)", item)
        if match is None:
            out.append(float(item))
            continue
        start, sign, step, count = match.groups()
        delta = float(step or 0) * (-1 if sign == "-" else 1)
        out.extend(float(start) + delta * i for i in range(int(count) + 1))
    return out


def parse_series(selector: str) -> tuple[str, dict[str, str]]:
    name, _, rest = selector.strip().partition("{")
    labels = dict(re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', rest))
    return name, labels


@dataclass(frozen=True)
class Case:
    """One alert_rule_test: an alert at an absolute time, with the alerts promtool expects."""

    file: str
    group: int
    at: int
    alertname: str
    expected: list[dict[str, str]]  # exp_labels of each expected alert


@dataclass
class Samples:
    """name -> labels (sorted tuple) -> [(time, value)]."""

    series: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]]

    def add(
        self, name: str, labels: Mapping[str, str], points: Sequence[tuple[int, float]]
    ) -> None:
        key = tuple(sorted(labels.items()))
        self.series.setdefault(name, {}).setdefault(key, []).extend(points)

    def openmetrics(self) -> str:
        lines = []
        for name in sorted(self.series):
            for labels, points in sorted(self.series[name].items()):
                text = ",".join(f'{k}="{v}"' for k, v in labels)
                for t, v in sorted(points):
                    lines.append(f"{name}{{{text}}} {v!r} {t}")
        return "\n".join(lines) + "\n# EOF\n"


def rule_test_data() -> tuple[Samples, list[Case]]:
    samples = Samples({})
    cases: list[Case] = []
    group_index = 0
    for path in RULE_TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            start = BASE + group_index * GROUP_SPAN
            step = seconds(group.get("interval", "1m"))
            for series in group["input_series"]:
                name, labels = parse_series(series["series"])
                # A timestamp is a time of the test: promtool's clock starts at 0, this
                # group's at ``start`` (so ``time() - timestamp`` means the same in both).
                shift = start if name.endswith("_timestamp_seconds") else 0
                points = [
                    (start + i * step, v + shift)
                    for i, v in enumerate(expand(series["values"]))
                    if v is not None
                ]
                samples.add(name, labels, points)
            for case in group.get("alert_rule_test", []):
                cases.append(
                    Case(
                        path.name,
                        group_index,
                        start + seconds(case["eval_time"]),
                        case["alertname"],
                        [dict(a.get("exp_labels", {})) for a in case.get("exp_alerts") or []],
                    )
                )
            group_index += 1
    return samples, cases


class PrometheusAt:
    """Instant queries against a Prometheus at a given time."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        reply = http_json(
            f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": at})
        )
        assert reply["status"] == "success", (expr, reply)
        result: list[dict[str, Any]] = reply["data"]["result"]
        return result

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        query = urllib.parse.urlencode({"match[]": match, "start": start, "end": end})
        reply = http_json(f"{self.url}/api/v1/label/{label}/values?{query}")
        assert reply["status"] == "success", (label, match, reply)
        values: list[str] = reply["data"]
        return values


@contextmanager
def prometheus_over(samples: Samples, workdir: Path) -> Iterator[PrometheusAt]:
    """A Prometheus serving ``samples`` (backfilled into a TSDB) on a loopback port."""
    promtool = binary("promtool", "promtool")
    source = workdir / "series.om"
    source.write_text(samples.openmetrics())
    tsdb = workdir / "tsdb"
    made = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(tsdb)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    with prometheus_serving(tsdb, workdir) as served:
        yield served


@contextmanager
def prometheus_serving(tsdb: Path, workdir: Path) -> Iterator[PrometheusAt]:
    """Debian's Prometheus over the blocks in ``tsdb`` (no scraping, no rules), on loopback."""
    server = binary("prometheus", "promtool")
    config = workdir / "prometheus.yml"
    config.write_text("global: {}\n")
    port = free_port()
    log = workdir / "prometheus.log"
    with process(
        [
            server,
            f"--config.file={config}",
            f"--storage.tsdb.path={tsdb}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        log,
    ) as proc:
        wait_until_answering(f"http://127.0.0.1:{port}/-/ready", proc, log)
        yield PrometheusAt(f"http://127.0.0.1:{port}")
