"""The follower's stream records on the state topic are written without json.dumps's
machinery; for any stream, state and gaps they are json.dumps's bytes, so keys and
records already on the topic are the same keys and read back the same."""

from __future__ import annotations

import base64
import json

from hypothesis import given
from hypothesis import strategies as st

from turnaudit.verify.follow_records import STREAM_KEY, OpenGaps, stream_key, stream_record

texts = st.text()  # any Unicode, surrogates and control characters included


@given(texts, texts)
def test_a_stream_key_is_json_dumps_of_its_session_and_producer(
    session: str, producer: str
) -> None:
    expected = (STREAM_KEY + json.dumps([session, producer])).encode()
    assert stream_key((session, producer)) == expected
    assert json.loads(stream_key((session, producer))[len(STREAM_KEY) :]) == [session, producer]


gaps = st.none() | st.builds(
    OpenGaps,
    st.integers(0, 10_000),
    st.dictionaries(st.integers(0, 2**40), st.floats(allow_nan=False, allow_infinity=False)),
    st.sets(st.integers(0, 2**40)),
)


@given(st.none() | st.integers(0, 2**31), st.binary(max_size=512), gaps)
def test_a_stream_record_is_json_dumps_of_its_fields(
    partition: int | None, state: bytes, open_gaps: OpenGaps | None
) -> None:
    record: dict[str, object] = {"p": partition, "s": base64.b64encode(state).decode()}
    if open_gaps is not None:
        record["g"] = {str(k): v for k, v in open_gaps.opened.items()}
        record["l"] = sorted(open_gaps.lost)
    written = stream_record(partition, state, open_gaps)
    assert written == json.dumps(record).encode()
    assert base64.b64decode(json.loads(written)["s"]) == state
