"""A/B of one ``turnaudit`` command line from two checkouts over the same topic, in one run.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python benchmarks/ab_commands.py \\
        --prefix bench-xxxxxxxx. --a /tmp/before --b . --b-row "--jobs 1" --rounds 3 -- verify
    ... -- replay --into 'jsonl:{out}/out.jsonl'

Each side is ``<checkout>/.venv/bin/turnaudit <command>``, a fresh process per run, with
``TURNAUDIT_TOPIC_PREFIX`` set to ``--prefix``; ``{out}`` is a fresh temporary directory
per run (also its working directory; its stdout and stderr go there). ``--b-row ARGS``
adds a row: B's command with ARGS appended (repeatable). Round n runs the rows rotated
by n (A,B then B,A ...). Measured per run: wall time and the child's CPU time (user +
system of it and the processes it waited for, from ``RUSAGE_CHILDREN`` deltas); events/s
is the topic's message count (high minus low watermark) over the wall time.

A run counts only if it did the whole job: exit code 0; ``verify`` must print
``messages read <count>`` and ``every turn accounted for``; every ``jsonl:`` output must
have one line per message. Anything else stops the A/B with the run's output tail.

``--until-proved`` is for ``verify --follow`` (a service that never ends): each run gets a
fresh consumer group and metrics port (the state topic deleted first, so it proves
everything again), and is timed until its ``turnaudit_verify_proved_offset`` gauges reach
the end of every partition; it is then stopped (SIGTERM) and its CPU counted once waited.

    ... --until-proved -- verify --follow
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from turnaudit.kafka.offsets import end_offsets, watermarks
from turnaudit.kafka.topic_deletion import delete_topics
from turnaudit.local_broker import free_ports
from turnaudit.settings import BOOTSTRAP_ENV, KafkaSettings
from turnaudit.topic_names import TopicNames


@dataclass(frozen=True)
class Row:
    name: str
    turnaudit: Path
    extra: tuple[str, ...]


@dataclass(frozen=True)
class Run:
    seconds: float
    cpu_seconds: float


def topic_messages(bootstrap: str, prefix: str) -> int:
    settings = KafkaSettings(bootstrap_servers=bootstrap, topics=TopicNames(prefix))
    marks = watermarks(settings, settings.topics.turn_events)
    return sum(high - marks.low.get(p, 0) for p, high in marks.high.items())


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def check(row: Row, argv: list[str], out: Path, code: int, messages: int) -> None:
    """Stop unless the run read and wrote everything (a failed run would look fast)."""
    stdout = (out / "stdout").read_text(errors="replace")
    problems = [] if code == 0 else [f"exit code {code}"]
    if argv and argv[0] == "verify":
        if not re.search(rf"messages read {messages}\b", stdout):
            problems.append(f"verify did not report 'messages read {messages}'")
        if "every turn accounted for" not in stdout:
            problems.append("verify did not say every turn is accounted for")
    for arg in argv:
        if arg.startswith("jsonl:"):
            path = Path(arg.removeprefix("jsonl:"))
            lines = sum(1 for _ in path.open("rb")) if path.exists() else 0
            if lines != messages:
                problems.append(f"{path.name} has {lines} lines, the topic {messages} messages")
    if problems:
        stderr = (out / "stderr").read_text(errors="replace")
        raise SystemExit(
            f"{row.name}: {'; '.join(problems)}\n--- stdout\n{stdout[-1500:]}"
            f"\n--- stderr\n{stderr[-1500:]}"
        )


def proved(port: int) -> dict[int, int]:
    """A follower's proved offset per partition (empty until it answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    return {
        int(s.labels["partition"]): int(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "turnaudit_verify_proved_offset"
    }


def follow_once(row: Row, command: list[str], env: dict[str, str], timeout: float) -> Run:
    """One follower from nothing until it has proved the whole topic, then stopped."""
    settings = KafkaSettings(
        bootstrap_servers=env[BOOTSTRAP_ENV], topics=TopicNames(env["TURNAUDIT_TOPIC_PREFIX"])
    )
    delete_topics(settings, [settings.topics.verify_state])
    end = end_offsets(settings, settings.topics.turn_events)
    (port,) = free_ports(1)
    env = {
        **env,
        "TURNAUDIT_HTTP_HOST": "127.0.0.1",
        "TURNAUDIT_HTTP_PORT": str(port),
        "TURNAUDIT_GROUP_ID": f"ab-follow-{uuid.uuid4().hex}",
        "TURNAUDIT_GROUP_INSTANCE_ID": "none",
    }
    with tempfile.TemporaryDirectory(prefix="turnaudit-ab-") as work:
        cpu_before, began = children_cpu(), time.perf_counter()
        proc = subprocess.Popen(
            [str(row.turnaudit), *command, *row.extra],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while True:
                at = proved(port)
                if all(at.get(p, 0) >= offset for p, offset in end.items() if offset):
                    seconds = time.perf_counter() - began
                    break
                if proc.poll() is not None:
                    raise SystemExit(f"{row.name}: the follower stopped (exit {proc.returncode})")
                if time.perf_counter() - began > timeout:
                    raise SystemExit(f"{row.name}: over {timeout:g} s: stopped")
                time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(60)
        return Run(seconds, children_cpu() - cpu_before)


def run_once(
    row: Row, command: list[str], env: dict[str, str], messages: int, timeout: float
) -> Run:
    with tempfile.TemporaryDirectory(prefix="turnaudit-ab-") as work:
        out = Path(work)
        argv = [arg.replace("{out}", work) for arg in (*command, *row.extra)]
        with (out / "stdout").open("wb") as stdout, (out / "stderr").open("wb") as stderr:
            cpu_before, began = children_cpu(), time.perf_counter()
            try:
                code = subprocess.run(
                    [str(row.turnaudit), *argv],
                    cwd=out,
                    env=env,
                    stdout=stdout,
                    stderr=stderr,
                    timeout=timeout,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                raise SystemExit(f"{row.name}: over {timeout:g} s: stopped") from None
            seconds, cpu = time.perf_counter() - began, children_cpu() - cpu_before
        check(row, argv, out, code, messages)
        return Run(seconds, cpu)


def spread(values: list[float], digits: int) -> str:
    return (
        f"{statistics.median(values):,.{digits}f} "
        f"({min(values):,.{digits}f}-{max(values):,.{digits}f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True, help="topic prefix of the published turns")
    parser.add_argument("--a", type=Path, required=True, help="checkout A (the baseline)")
    parser.add_argument("--b", type=Path, required=True, help="checkout B")
    parser.add_argument(
        "--b-row",
        action="append",
        default=[],
        metavar="ARGS",
        help="a further B row: B's command with ARGS appended (repeatable)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    parser.add_argument(
        "--until-proved",
        action="store_true",
        help="verify --follow: time each run until it has proved the whole topic",
    )
    parser.add_argument("command", nargs="+", help="the turnaudit command line (after --)")
    args = parser.parse_args()
    bootstrap = os.environ.get(BOOTSTRAP_ENV)
    if not bootstrap:
        parser.error(f"set {BOOTSTRAP_ENV} (the broker holding --prefix's topic)")
    messages = topic_messages(bootstrap, args.prefix)
    if messages == 0:
        parser.error(f"{args.prefix}turn-events holds no messages")
    rows = [
        Row("A", args.a.resolve() / ".venv/bin/turnaudit", ()),
        Row("B", args.b.resolve() / ".venv/bin/turnaudit", ()),
    ]
    rows += [
        Row(f"B {extra}", rows[1].turnaudit, tuple(shlex.split(extra))) for extra in args.b_row
    ]
    env = {**os.environ, BOOTSTRAP_ENV: bootstrap, "TURNAUDIT_TOPIC_PREFIX": args.prefix}
    runs: dict[str, list[Run]] = {row.name: [] for row in rows}
    for n in range(args.rounds):
        for row in rows[n % len(rows) :] + rows[: n % len(rows)]:
            run = (
                follow_once(row, args.command, env, args.timeout)
                if args.until_proved
                else run_once(row, args.command, env, messages, args.timeout)
            )
            runs[row.name].append(run)
            print(
                f"round {n + 1}: {row.name:16} {run.seconds:7.2f} s wall "
                f"{run.cpu_seconds:7.2f} s CPU",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"turnaudit {shlex.join(args.command)}: {messages:,} messages of "
        f"{args.prefix}turn-events, {args.rounds} rounds (rotated), a fresh process per run"
    )
    print(
        f"{'row':16} {'events/s median (min-max)':>30} {'B/A':>6} "
        f"{'CPU us/event median (min-max)':>32} {'B/A':>6}"
    )
    rate = {name: [messages / r.seconds for r in found] for name, found in runs.items()}
    cpu = {name: [1e6 * r.cpu_seconds / messages for r in found] for name, found in runs.items()}
    for row in rows:
        rate_ratio = statistics.median(rate[row.name]) / statistics.median(rate["A"])
        cpu_ratio = statistics.median(cpu[row.name]) / statistics.median(cpu["A"])
        print(
            f"{row.name:16} {spread(rate[row.name], 0):>30} {rate_ratio:6.2f} "
            f"{spread(cpu[row.name], 1):>32} {cpu_ratio:6.2f}"
        )


if __name__ == "__main__":
    main()
