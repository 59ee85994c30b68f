"""The Ollama adapter against a real HTTP server speaking Ollama's API shapes."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from turnaudit.errors import ConfigurationError
from turnaudit.evaluation.errors import (
    AuditorIdentityError,
    AuditorResponseError,
    AuditorUnavailableError,
)
from turnaudit.evaluation.evidence import produce_evidence
from turnaudit.evaluation.files import load_evidence
from turnaudit.evaluation.model_auditor import OllamaAuditor, parse_verdict

from .builders import FAMILIES, healthy_steps, label_pack

TAG = "qwen3.5:2b"
DIGEST = "324d162be6ca5629ae4517c8710434d0bd2d665bc94dbad46e9af8fbf8a2f0df"
OTHER_DIGEST = "f" * 64


class FakeOllama:
    """Serves /api/tags and /api/generate; answers ALARM once a prefix shows a refusal."""

    def __init__(self) -> None:
        self.digest = DIGEST
        self.switch_digest_after: int | None = None  # generate calls before the tag moves
        self.answer: str | None = None  # fixed answer instead of the refusal rule
        self.generate_bodies: list[dict[str, Any]] = []
        self.tags_requests = 0
        self.lock = threading.Lock()

    def tags(self) -> dict[str, Any]:
        with self.lock:
            self.tags_requests += 1
            digest = self.digest
        return {
            "models": [
                {"name": "llama3:8b", "model": "llama3:8b", "digest": "0" * 64, "size": 1},
                {
                    "name": TAG,
                    "model": TAG,
                    "modified_at": "2025-01-01T00:00:00Z",
                    "size": 2,
                    "digest": digest,
                    "details": {"family": "qwen3"},
                },
            ]
        }

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.generate_bodies.append(body)
            if self.switch_digest_after == len(self.generate_bodies):
                self.digest = OTHER_DIGEST
        answer = self.answer or ("ALARM" if '"refusal_emitted":true' in body["prompt"] else "OK")
        return {
            "model": body["model"],
            "created_at": "2025-01-01T00:00:00Z",
            "response": answer,
            "done": True,
            "done_reason": "stop",
        }


def _handler(fake: FakeOllama) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/api/tags":
                self._reply(200, fake.tags())
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/api/generate":
                self._reply(200, fake.generate(body))
            else:
                self._reply(404, {"error": "not found"})

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    return Handler


@pytest.fixture
def ollama() -> Iterator[tuple[FakeOllama, str]]:
    fake = FakeOllama()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def battery() -> list[dict[str, Any]]:
    """24 cases over 4 families; positives refuse at step 2. Cases repeat the same steps."""
    cases = []
    for family in FAMILIES:
        for i in range(6):
            steps = healthy_steps(4)
            positive = i < 3
            if positive:
                steps[2]["refusal_emitted"] = True
            cases.append(
                {
                    "task_id": f"{family}-{i}",
                    "task_family": family,
                    "oracle_source": "scripted@v1",
                    "oracle_alarm_step": 2 if positive else None,
                    "trace": {"steps": steps, "source": {"i": i}},
                }
            )
    return cases


def produce(tmp_path: Path, auditor: OllamaAuditor) -> dict[str, Any]:
    return produce_evidence(
        label_pack(battery()),
        auditor,
        evidence_output=tmp_path / "evidence.json",
        report_output=tmp_path / "report.json",
    )


def test_battery_sends_one_fresh_request_per_prefix_and_passes(
    ollama: tuple[FakeOllama, str], tmp_path: Path
) -> None:
    fake, url = ollama

    report = produce(tmp_path, OllamaAuditor(url, TAG, DIGEST))

    # 24 cases x 4 prefixes; identical prefixes across cases are still asked afresh.
    assert len(fake.generate_bodies) == 24 * 4
    assert fake.tags_requests == 2  # pinned before, re-checked after
    first = fake.generate_bodies[0]
    assert first["model"] == TAG
    assert first["stream"] is False
    assert first["options"] == {"temperature": 0, "seed": 0}
    assert "keep_alive" in first
    step_lines = [b["prompt"].count('{"index":') for b in fake.generate_bodies[:4]]
    assert step_lines == [1, 2, 3, 4]
    assert report["decision"] == "pass", report["failed_requirements"]
    evidence = load_evidence(tmp_path / "evidence.json")
    assert evidence.auditor_id.name == f"ollama/{TAG}"
    assert evidence.auditor_id.digest == f"sha256:{DIGEST}"


def test_digest_mismatch_is_refused_before_any_generate_call(
    ollama: tuple[FakeOllama, str], tmp_path: Path
) -> None:
    fake, url = ollama

    with pytest.raises(AuditorIdentityError, match=f"resolves to sha256:{DIGEST}.*refusing"):
        produce(tmp_path, OllamaAuditor(url, TAG, OTHER_DIGEST))
    assert fake.generate_bodies == []
    assert not (tmp_path / "evidence.json").exists()


def test_expected_digest_is_accepted_with_or_without_prefix(ollama: tuple[FakeOllama, str]) -> None:
    _, url = ollama
    for expected in (DIGEST, f"sha256:{DIGEST}", DIGEST.upper()):
        auditor = OllamaAuditor(url, TAG, expected)
        auditor.begin_battery()
        assert auditor.identity.digest == f"sha256:{DIGEST}"


def test_malformed_expected_digest_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="not 64 hex digits"):
        OllamaAuditor("http://127.0.0.1:1", TAG, "sha256:1234")


def test_digest_change_during_battery_fails_evidence_production(
    ollama: tuple[FakeOllama, str], tmp_path: Path
) -> None:
    fake, url = ollama
    fake.switch_digest_after = 10

    with pytest.raises(AuditorIdentityError, match="changed digest during the battery"):
        produce(tmp_path, OllamaAuditor(url, TAG, DIGEST))
    assert len(fake.generate_bodies) == 24 * 4  # the battery ran; its end check caught it
    assert not (tmp_path / "evidence.json").exists()
    assert not (tmp_path / "report.json").exists()


def test_tag_not_served_is_refused(ollama: tuple[FakeOllama, str]) -> None:
    _, url = ollama

    with pytest.raises(AuditorIdentityError, match=r"does not serve 'qwen3\.5:7b'"):
        OllamaAuditor(url, "qwen3.5:7b", DIGEST).begin_battery()


def test_unreachable_ollama_is_a_clear_error() -> None:
    with socket.socket() as sock:  # a port nothing listens on once the socket closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    with pytest.raises(AuditorUnavailableError, match=f"cannot reach Ollama at .*:{port}"):
        OllamaAuditor(f"http://127.0.0.1:{port}", TAG, DIGEST, timeout=5).begin_battery()


def test_unparseable_answer_stops_the_battery(
    ollama: tuple[FakeOllama, str], tmp_path: Path
) -> None:
    fake, url = ollama
    fake.answer = "I am not sure."

    with pytest.raises(AuditorResponseError, match="neither ALARM nor OK"):
        produce(tmp_path, OllamaAuditor(url, TAG, DIGEST))
    assert len(fake.generate_bodies) == 1


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("ALARM", "alarm"),
        ("OK", "ok"),
        ("ok.", "ok"),
        ("  Alarm\n", "alarm"),
        ("<think>Is it OK? Looks fine.</think>\nALARM", "alarm"),
        ("OK - no reason to ALARM", "ok"),
    ],
)
def test_parse_verdict(text: str, verdict: str) -> None:
    assert parse_verdict(text) == verdict


@pytest.mark.parametrize("text", ["", "BROKEN", "okay", "<think>OK</think>"])
def test_parse_verdict_refuses_other_answers(text: str) -> None:
    with pytest.raises(AuditorResponseError):
        parse_verdict(text)


def test_cli_evidence_with_ollama(
    ollama: tuple[FakeOllama, str],
    tmp_path: Path,
    eval_cli: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake, url = ollama
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(label_pack(battery())))
    args = [
        "eval",
        "evidence",
        str(labels),
        "--model",
        TAG,
        "--ollama-url",
        url,
        "--output",
        str(tmp_path / "e.json"),
        "--report",
        str(tmp_path / "r.json"),
    ]

    assert eval_cli([*args, "--expected-digest", DIGEST]) == 0
    assert eval_cli([*args, "--expected-digest", OTHER_DIGEST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "refusing to run" in err

    fake.answer = "ALARM"  # alarms on every prefix: every healthy trace is a false alarm
    assert eval_cli([*args, "--expected-digest", DIGEST]) == 1
    assert json.loads((tmp_path / "r.json").read_text())["decision"] == "hold"
