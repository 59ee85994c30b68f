"""Avro schemas, wire formats and codecs for TurnEvents."""
