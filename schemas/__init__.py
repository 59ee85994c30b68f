"""Versioned Avro schemas shipped with the package (``*.avsc``)."""
