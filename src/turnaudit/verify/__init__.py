"""``turnaudit verify``: proves, for a range of the stream, that every turn is there once
and counted (emitted = on the stream = logged = counted).

The pure parts import nothing from Kafka: ``verifier`` (the ``Verifier``, fed
every message of a range), ``counts``, ``findings``, ``reconciliation`` (a log
sink's lines and a ``/metrics`` page against the range) and ``report`` (the
typed report, its ``--json`` form and its summary). Around them: ``files``
(the log-sink file, an earlier report's heads), ``scrape`` (the metrics
service over HTTP), ``kafka_reads`` (the range and its dead letters) and
``run`` (``run_verify``, ``range_report``).

What counts as unexplained (exit 1): a position still missing at the end
(lost), a late arrival (a stream's events stored out of order), a chain break,
an event id with other content, another event at a taken position, a key that
is not the session id, a contract breach, an undecodable message that is not
dead-lettered, a turn the log sink did not write or the counters did not
count. Explained, reported: redeliveries and duplicate copies of the same
event (at-least-once), dead letters with their reasons.
"""
