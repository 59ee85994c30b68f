"""Every command x every bad value: one line on stderr, the right exit code, no
traceback, in bounded time.

The table runs each case as a real ``turnaudit`` process (several at once, so
the table stays quick); each row is then its own test. Exit 2: usage and
configuration; exit 1: a runtime failure such as a cluster that does not answer.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.cli import BOUND_S, CONNECT_TIMEOUT_S, LOCAL_PORT, Case, Outcome, run_case
from tests.support.trust_cli import TRUST_CASES, trust_files
from turnaudit.local_broker import free_port

# Commands that talk to a cluster, with the arguments they need to get that far.
CLUSTER_COMMANDS = {
    "demo": ["demo"],
    "topics create": ["topics", "create"],
    "simulate": ["simulate", "--events", "5"],
    "tail": ["tail"],
    "sink logs": ["sink", "logs"],
    "sink metrics": ["sink", "metrics"],
    "sink otel": ["sink", "otel"],
    "htir feed": ["htir", "feed"],
    "auditor run": ["auditor", "run", "--labels", "labels.json", "--evidence", "ev.json"],
    "dlq count": ["dlq", "count"],
    "dlq redrive": ["dlq", "redrive", "--dry-run"],
}
SERVICES = {
    k: v
    for k, v in CLUSTER_COMMANDS.items()
    if k in ("sink logs", "sink metrics", "sink otel", "htir feed")
}
# Long-running services do not exit while the cluster is away: not ready, one
# line in their log, then a bounded rate of lines (tests/unit/consumers/test_health.py).
LONG_RUNNING = ("sink logs", "sink metrics", "sink otel", "htir feed", "auditor run")
NOWHERE = f"127.0.0.1:{free_port()}"
BUSY_PORT = free_port()


def _cases() -> list[Case]:
    cases: list[Case] = []
    for name, argv in CLUSTER_COMMANDS.items():
        if name not in LONG_RUNNING:  # services wait: tests/unit/consumers/test_health.py
            cases.append(
                Case(
                    f"{name}: cluster unreachable",
                    argv,
                    {"KAFKA_BOOTSTRAP_SERVERS": NOWHERE},
                    1,
                    f"cannot reach {NOWHERE} within {CONNECT_TIMEOUT_S} s: is the cluster up",
                )
            )
        cases.append(
            Case(
                f"{name}: unknown librdkafka option",
                argv,
                {
                    "KAFKA_BOOTSTRAP_SERVERS": NOWHERE,
                    "TURNAUDIT_KAFKA_OPTIONS": '{"no.such.option": "1"}',
                },
                2,
                'TURNAUDIT_KAFKA_OPTIONS: No such configuration property: "no.such.option"',
            )
        )
        cases.append(
            Case(
                f"{name}: options not JSON",
                argv,
                {"TURNAUDIT_KAFKA_OPTIONS": "{nope"},
                2,
                "TURNAUDIT_KAFKA_OPTIONS is not a JSON object",
            )
        )
        cases.append(
            Case(
                f"{name}: TURNAUDIT_LOG_LEVEL=bogus",
                argv,
                {"TURNAUDIT_LOG_LEVEL": "bogus"},
                2,
                "TURNAUDIT_LOG_LEVEL='bogus': choose DEBUG, INFO, WARNING or ERROR",
            )
        )
        cases.append(
            Case(
                f"{name}: partitions not a number",
                argv,
                {"TURNAUDIT_TOPIC_PARTITIONS": "zero"},
                2,
                "TURNAUDIT_TOPIC_PARTITIONS='zero' is not a whole number",
            )
        )
        cases.append(
            Case(
                f"{name}: connect timeout 0",
                argv,
                {"TURNAUDIT_CONNECT_TIMEOUT_S": "0"},
                2,
                "TURNAUDIT_CONNECT_TIMEOUT_S=0 is below 1",
            )
        )
    for name, argv in CLUSTER_COMMANDS.items():
        if name == "demo" or name in LONG_RUNNING:
            continue  # the demo starts the local broker itself; services wait for it
        cases.append(
            Case(
                f"{name}: local broker not running",
                argv,
                {"TURNAUDIT_BROKER_PORT": str(LOCAL_PORT)},
                1,
                f"cannot reach 127.0.0.1:{LOCAL_PORT} within {CONNECT_TIMEOUT_S} s: "
                "is the broker running? (turnaudit broker start)",
            )
        )
    cases.append(
        Case(
            "topics create --wait 4: cluster unreachable",
            ["topics", "create", "--wait", "4"],
            {"KAFKA_BOOTSTRAP_SERVERS": NOWHERE},
            1,
            f"cannot reach {NOWHERE} within 4 s",
        )
    )
    cases.append(
        Case(
            "topics create --wait -1",
            ["topics", "create", "--wait", "-1"],
            {},
            2,
            "--wait -1: give 0 or more seconds",
        )
    )
    for name, argv in SERVICES.items():
        cases.append(
            Case(
                f"{name}: TURNAUDIT_HTTP_PORT=70000",
                argv,
                {"TURNAUDIT_HTTP_PORT": "70000"},
                2,
                "TURNAUDIT_HTTP_PORT=70000 is above 65535",
            )
        )
        cases.append(
            Case(
                f"{name}: TURNAUDIT_HTTP_PORT=-1",
                argv,
                {"TURNAUDIT_HTTP_PORT": "-1"},
                2,
                "TURNAUDIT_HTTP_PORT=-1 is below 0",
            )
        )
        cases.append(
            Case(
                f"{name}: HTTP port in use",
                argv,
                {"TURNAUDIT_HTTP_PORT": str(BUSY_PORT), "KAFKA_BOOTSTRAP_SERVERS": NOWHERE},
                2,
                f"TURNAUDIT_HTTP_PORT={BUSY_PORT}: cannot listen on 0.0.0.0:{BUSY_PORT} "
                "(Address already in use): choose a free port",
            )
        )
    cases += [
        Case(
            "dlq show: not a position",
            ["dlq", "show", "7"],
            {},
            2,
            "turnaudit dlq: '7' is not a partition:offset like 0:42",
        ),
        Case(
            "dlq list: --until before --since",
            ["dlq", "list", "--since", "2026-02-01", "--until", "2026-01-01"],
            {},
            2,
            "turnaudit dlq: --until must be later than --since",
        ),
        Case(
            "dlq count: --since not a time",
            ["dlq", "count", "--since", "yesterday"],
            {},
            2,
            "argument --since: 'yesterday' is not an ISO 8601 time",
        ),
        Case(
            "dlq redrive: --partition negative",
            ["dlq", "redrive", "--partition", "-1"],
            {},
            2,
            "argument --partition: -1 is negative",
        ),
        Case("dlq: no action", ["dlq"], {}, 2, "the following arguments are required: ACTION"),
        Case(
            "verify: --memory-ids 0",
            ["verify", "--memory-ids", "0"],
            {},
            2,
            "argument --memory-ids: 0 is not a positive number",
        ),
        Case(
            "verify: --memory-ids with --follow",
            ["verify", "--follow", "--memory-ids", "5"],
            {},
            2,
            "turnaudit verify: --memory-ids is for a range, not --follow (--workers N)",
        ),
        Case(
            "verify: --memory-streams and --jobs with --follow",
            ["verify", "--follow", "--memory-streams", "5", "--jobs", "2"],
            {},
            2,
            "turnaudit verify: --memory-streams and --jobs are for a range, not --follow "
            "(--workers N)",
        ),
        Case(
            "verify: --memory-streams 0",
            ["verify", "--memory-streams", "0"],
            {},
            2,
            "argument --memory-streams: 0 is not a positive number",
        ),
        Case(
            "verify: --jobs 0",
            ["verify", "--jobs", "0"],
            {},
            2,
            "argument --jobs: 0 is not a positive number",
        ),
        Case(
            "simulate: --metrics-port in use",
            ["simulate", "--metrics-port", str(BUSY_PORT)],
            {},
            2,
            f"turnaudit simulate: --metrics-port {BUSY_PORT}: cannot listen on "
            f"127.0.0.1:{BUSY_PORT}",
        ),
        Case(
            "replay: --step with a jsonl output",
            ["replay", "--step", "60", "--into", "jsonl:{tmp}/x.jsonl"],
            {},
            2,
            "turnaudit replay: --step applies to metrics and tsdb outputs, not jsonl:",
        ),
        Case(
            "replay: --step 0",
            ["replay", "--step", "0", "--into", "tsdb:{tmp}/b"],
            {},
            2,
            "argument --step: '0': at least one millisecond",
        ),
        Case(
            "sink logs: TURNAUDIT_LOG_FILE is a directory",
            ["sink", "logs"],
            {"TURNAUDIT_LOG_FILE": "{tmp}"},
            2,
            "TURNAUDIT_LOG_FILE={tmp} is a directory",
        ),
        Case(
            "sink logs: TURNAUDIT_LOG_FILE unwritable",
            ["sink", "logs"],
            {"TURNAUDIT_LOG_FILE": "{tmp}/a-file/turns.jsonl"},
            2,
            "TURNAUDIT_LOG_FILE={tmp}/a-file/turns.jsonl cannot be written",
        ),
        Case(
            "sink logs: TURNAUDIT_LOG_SURFACES=bogus",
            ["sink", "logs"],
            {"TURNAUDIT_LOG_SURFACES": "bogus"},
            2,
            "TURNAUDIT_LOG_SURFACES='bogus'",
        ),
        Case(
            "htir feed: TURNAUDIT_SURFACES and TURNAUDIT_LOG_SURFACES disagree",
            ["htir", "feed"],
            {"TURNAUDIT_SURFACES": "keep", "TURNAUDIT_LOG_SURFACES": "drop"},
            2,
            "TURNAUDIT_LOG_SURFACES='drop' and TURNAUDIT_SURFACES='keep' disagree: set one",
        ),
        Case(
            "replay: TURNAUDIT_SURFACES=hash without a key",
            ["replay", "--into", "jsonl:{tmp}/out.jsonl"],
            {"TURNAUDIT_SURFACES": "hash"},
            2,
            "TURNAUDIT_LOG_SURFACES=hash needs a key in TURNAUDIT_LOG_HASH_KEY",
        ),
        Case(
            "any command: TURNAUDIT_FILE_MODE=0644",
            ["tail"],
            {"TURNAUDIT_FILE_MODE": "0644"},
            2,
            "TURNAUDIT_FILE_MODE=0644: give an octal mode with the owner's read and write",
        ),
        Case(
            "sink otel: TURNAUDIT_OTLP_PROTOCOL=udp",
            ["sink", "otel"],
            {"TURNAUDIT_OTLP_PROTOCOL": "udp"},
            2,
            "TURNAUDIT_OTLP_PROTOCOL='udp': choose grpc|http",
        ),
        Case(
            "sink otel: TURNAUDIT_OTLP_ENDPOINT without a scheme",
            ["sink", "otel"],
            {"TURNAUDIT_OTLP_ENDPOINT": "collector:4317"},
            2,
            "TURNAUDIT_OTLP_ENDPOINT='collector:4317': give the collector's URL, http://host:port",
        ),
        Case(
            "sink otel: TURNAUDIT_OTLP_ENDPOINT with a path for gRPC",
            ["sink", "otel"],
            {"TURNAUDIT_OTLP_ENDPOINT": "http://collector:4317/v1/logs"},
            2,
            "an OTLP/gRPC endpoint has no path",
        ),
        Case(
            "sink otel: TURNAUDIT_OTLP_TIMEOUT_MS=0",
            ["sink", "otel"],
            {"TURNAUDIT_OTLP_TIMEOUT_MS": "0"},
            2,
            "TURNAUDIT_OTLP_TIMEOUT_MS=0 is below 100",
        ),
        Case(
            "simulate: unwritable --spool-dir",
            ["simulate", "--spool-dir", "{tmp}/a-file/spool"],
            {},
            2,
            "argument --spool-dir: {tmp}/a-file/spool is not a writable folder",
        ),
        Case(
            "demo: unwritable --spool-dir",
            ["demo", "--spool-dir", "{tmp}/a-file/spool"],
            {},
            2,
            "argument --spool-dir: {tmp}/a-file/spool is not a writable folder",
        ),
        Case(
            "simulate: --events many",
            ["simulate", "--events", "many"],
            {},
            2,
            "'many' is not a whole number",
        ),
        Case(
            "tail --limit -1",
            ["tail", "--limit", "-1"],
            {},
            2,
            "argument --limit: -1 is not a positive number",
        ),
        Case(
            "tail --limit 0",
            ["tail", "--limit", "0"],
            {},
            2,
            "argument --limit: 0 is not a positive number",
        ),
        Case(
            "tail --from yesterday",
            ["tail", "--from", "yesterday"],
            {},
            2,
            "'yesterday' is not an ISO 8601 time",
        ),
        Case(
            "htir feed --idle-timeout 0",
            ["htir", "feed", "--idle-timeout", "0"],
            {"KAFKA_BOOTSTRAP_SERVERS": NOWHERE},
            2,
            "--idle-timeout must be positive",
        ),
        Case(
            "broker status: TURNAUDIT_BROKER_PORT=70000",
            ["broker", "status"],
            {"TURNAUDIT_BROKER_PORT": "70000"},
            2,
            "TURNAUDIT_BROKER_PORT=70000 is above 65535",
        ),
        Case(
            "broker start: TURNAUDIT_LOG_LEVEL=bogus",
            ["broker", "start"],
            {"TURNAUDIT_LOG_LEVEL": "bogus"},
            2,
            "TURNAUDIT_LOG_LEVEL='bogus'",
        ),
        Case(
            "--log-level bogus",
            ["--log-level", "bogus", "tail"],
            {},
            2,
            "argument --log-level: invalid choice: 'BOGUS'",
        ),
    ]
    return cases


CASES = _cases() + TRUST_CASES


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    with socket.socket() as busy:  # a port some other process listens on
        busy.bind(("0.0.0.0", BUSY_PORT))  # noqa: S104 - the services bind every address
        busy.listen()
        dirs = {}
        for case in CASES:
            tmp = tmp_path_factory.mktemp("cli")
            trust_files(tmp)  # also the "a-file" every table row may name
            dirs[case.name] = tmp
        with ThreadPoolExecutor(max_workers=6) as pool:
            futures = {c.name: pool.submit(run_case, c, dirs[c.name]) for c in CASES}
            yield {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_one_line_right_exit_code_no_traceback(case: Case, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[case.name]
    lines = outcome.stderr.strip().splitlines()
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert len(lines) == 1, outcome.stderr
    assert lines[0].startswith("turnaudit"), lines[0]
    assert case.says.replace("{tmp}", outcome.tmp) in lines[0]
    assert outcome.returncode == case.exit_code, lines[0]
    assert outcome.elapsed < BOUND_S
    assert "PRIVATE KEY" not in outcome.stderr  # no failure shows a signing key


def test_every_cluster_command_is_in_the_table() -> None:
    for name in CLUSTER_COMMANDS:
        kinds = {c.name.split(": ", 1)[1] for c in CASES if c.name.startswith(name + ": ")}
        expected = {"unknown librdkafka option", "TURNAUDIT_LOG_LEVEL=bogus"}
        if name not in LONG_RUNNING:
            expected.add("cluster unreachable")
        assert expected <= kinds, name


def test_debug_shows_the_traceback_and_librdkafka(tmp_path: Path) -> None:
    outcome = run_case(
        Case("debug", ["--log-level", "DEBUG", "tail"], {"KAFKA_BOOTSTRAP_SERVERS": NOWHERE}),
        tmp_path,
    )
    assert outcome.returncode == 1
    assert "Traceback" in outcome.stderr
    assert "librdkafka" in outcome.stderr  # its own connection lines, at DEBUG only
    assert (
        outcome.stderr.strip()
        .splitlines()[-1]
        .startswith(f"turnaudit tail: cannot reach {NOWHERE}")
    )
