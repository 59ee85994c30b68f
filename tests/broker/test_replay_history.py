"""Prometheus history from the stream: a replayed simulated hour becomes TSDB blocks,
and the real Prometheus answers a per-pack refusal rate over it, step by step equal to
the counts ``verify`` gives for the same event-time windows."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.promdata import prometheus_serving
from tests.support.realparts import binary, tools_path
from tests.support.streams import publish_simulated
from turnaudit.cli import main
from turnaudit.settings import KafkaSettings

pytestmark = pytest.mark.broker

STEP_S = 600
TURNS = 19_000  # the simulated clock moves 5..400 ms a turn: a little over an hour
JOB = '{job="turnaudit-replay"}'


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def boundaries(openmetrics: str) -> list[float]:
    """The step boundaries the history has samples at (every series has them all)."""
    first = next(
        line for line in openmetrics.splitlines() if line.startswith("turnaudit_turns_total{")
    )
    series = first.rsplit(" ", 2)[0]
    return [
        float(line.rsplit(" ", 1)[1])
        for line in openmetrics.splitlines()
        if line.startswith(series + " ")
    ]


def per_pack(result: list[dict[str, object]]) -> dict[str, int]:
    return {
        r["metric"]["pack"]: round(float(r["value"][1]))  # type: ignore[index]  # Prometheus' JSON: mappings here
        for r in result
        if float(r["value"][1]) != 0
    }  # type: ignore[index]  # Prometheus' JSON: mappings here


def test_a_replayed_hour_answers_per_pack_refusal_rates_equal_to_verify(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    publish_simulated(kafka_settings, TURNS, tmp_path / "spool", seed=3)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_settings.bootstrap_servers or "")
    monkeypatch.setenv("TURNAUDIT_TOPIC_PREFIX", kafka_settings.topics.prefix)
    binary("promtool", "promtool")
    monkeypatch.setenv("PATH", tools_path())  # `replay --into tsdb:` runs promtool from PATH
    tsdb = tmp_path / "tsdb"
    assert (
        main(
            [
                "replay",
                "--step",
                str(STEP_S),  # the whole stream, in steps of event time
                "--into",
                f"tsdb:{tsdb}",
            ]
        )
        == 0
    )
    times = boundaries((tsdb / "replay.om").read_text())
    assert times[-1] - times[0] >= 3600, times  # at least one simulated hour
    assert [b - a for a, b in itertools.pairwise(times)] == [STEP_S] * (len(times) - 1)

    def change(metric: str, at: float) -> dict[str, int]:
        expr = f"sum by (pack) ({metric}{JOB} - {metric}{JOB} offset {STEP_S}s)"
        return per_pack(prometheus.query(expr, at))

    rates_checked = 0
    with prometheus_serving(tsdb, tmp_path) as prometheus:
        for since, until in itertools.pairwise(times):
            capsys.readouterr()
            code = main(
                ["verify", "--json", "--time", "event", "--from", iso(since), "--to", iso(until)]
            )
            report = json.loads(capsys.readouterr().out)
            assert code == 0, report["unexplained"]
            packs = report["counts"]["per_pack"]
            turns = change("turnaudit_turns_total", until)
            refused = change("turnaudit_refused_turns_total", until)
            assert turns == {p: c["turns"] for p, c in packs.items() if c["turns"]}, since
            assert refused == {p: c["refused"] for p, c in packs.items() if c["refused"]}, since
            # The rate a dashboard shows: refused over turns, per pack, for the step.
            rate = prometheus.query(
                f"sum by (pack) (turnaudit_refused_turns_total{JOB} - "
                f"turnaudit_refused_turns_total{JOB} offset {STEP_S}s) / sum by (pack) "
                f"(turnaudit_turns_total{JOB} - turnaudit_turns_total{JOB} offset {STEP_S}s)",
                until,
            )
            for r in rate:
                pack = r["metric"]["pack"]
                expected = packs[pack]["refused"] / packs[pack]["turns"]
                assert float(r["value"][1]) == pytest.approx(expected), (since, pack)
                rates_checked += 1
    assert rates_checked >= len(times) - 1
