"""The project's rule for topic prefixes, judged by Kafka's own code.

``check_topic_prefix`` (one rule: ``TopicNames``, ``topics create``, ``acls plan|apply``)
must accept a prefix exactly when Kafka's ``Topic.validate`` (kafka-clients, from the
broker's jars) accepts every topic name the project makes under it. One JVM judges a
batch of generated prefixes: arbitrary text, legal characters, lengths about the bound.
"""

from __future__ import annotations

import shutil
import string
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import PROJECT_ROOT
from turnaudit.errors import ConfigurationError
from turnaudit.topic_names import TOPIC_SUFFIXES, check_topic_prefix

pytestmark = pytest.mark.broker

JARS = PROJECT_ROOT / "deploy/kafka/target/jars"
JUDGE = """\
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.common.internals.Topic;

public class TopicJudge {
    public static void main(String[] args) throws Exception {
        BufferedReader in =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String name = new String(HexFormat.of().parseHex(line), StandardCharsets.UTF_8);
            try {
                Topic.validate(name);
                System.out.println("accepted");
            } catch (RuntimeException refused) {
                System.out.println("refused");
            }
        }
    }
}
"""
LEGAL = string.ascii_letters + string.digits + "._-"
candidates = (
    st.text(max_size=16)
    | st.text(alphabet=LEGAL + " /:\u00e9\u0000", max_size=16)
    # About the length bound: a long run, then a few characters of any kind.
    | st.builds(lambda n, tail: "p" * n + tail, st.integers(220, 232), st.text(max_size=4))
)


def kafka_judges(names: list[str], folder: Path) -> list[bool]:
    java = shutil.which("java")
    assert java is not None, "the test machine needs a Java runtime"
    assert (JARS / ".resolved").exists(), "the broker's jars: make setup"
    source = folder / "TopicJudge.java"
    source.write_text(JUDGE)
    result = subprocess.run(
        [java, "-cp", f"{JARS}/*", str(source)],
        input="".join(name.encode().hex() + "\n" for name in names),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    verdicts = result.stdout.split()
    assert len(verdicts) == len(names), result.stderr
    return [v == "accepted" for v in verdicts]


@given(prefixes=st.lists(candidates, min_size=80, max_size=80))
@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_prefix_is_accepted_exactly_when_kafka_accepts_every_topic_under_it(
    prefixes: list[str], tmp_path: Path
) -> None:
    prefixes = [*prefixes, "", "bad prefix/", "x" * 229, "x" * 230, ".", ".."]
    names = [p + suffix for p in prefixes for suffix in TOPIC_SUFFIXES]
    verdicts = iter(kafka_judges(names, tmp_path))
    judged = set()
    for prefix in prefixes:
        kafka = all([next(verdicts) for _ in TOPIC_SUFFIXES])
        try:
            check_topic_prefix(prefix, "--prefix")
            ours = True
        except ConfigurationError:
            ours = False
        assert ours == kafka, repr(prefix)
        judged.add(kafka)
    assert judged == {True, False}  # both sides of the rule were tried
