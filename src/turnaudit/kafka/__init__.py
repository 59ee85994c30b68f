"""Thin wrappers around confluent-kafka: topics, the local broker."""
