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
from dataclasses import dataclass
from pathlib import Path

from turnaudit.kafka.offsets import watermarks
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
    env = {**os.environ, "TURNAUDIT_TOPIC_PREFIX": args.prefix}
    runs: dict[str, list[Run]] = {row.name: [] for row in rows}
    for n in range(args.rounds):
        for row in rows[n % len(rows) :] + rows[: n % len(rows)]:
            run = run_once(row, args.command, env, messages, args.timeout)
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
