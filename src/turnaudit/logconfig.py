"""structlog set-up for the command line: JSON lines on stderr.

Libraries in this package only call ``structlog.get_logger``; an application
embedding them keeps its own configuration. The CLI configures once here.
"""

from __future__ import annotations

import logging
import sys

import structlog

from turnaudit.settings import LIBRDKAFKA_LOGGER

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_LIBRDKAFKA_HANDLER = logging.StreamHandler(sys.stderr)
_LIBRDKAFKA_HANDLER.setFormatter(logging.Formatter("librdkafka %(levelname)s %(message)s"))


# The level the command line was configured with: processes it spawns (verify's jobs) log
# as it does, on stderr, never on stdout where a command's output goes.
_cli_level = "WARNING"


def cli_log_level() -> str:
    return _cli_level


def configure_cli_logging(level: str = "INFO") -> None:
    global _cli_level  # noqa: PLW0603 - one process-wide setting, as structlog's own
    _cli_level = level
    # librdkafka's own lines (connection refused, ...) only at DEBUG: otherwise
    # the command's one line says what is wrong.
    if level.upper() == "DEBUG":
        LIBRDKAFKA_LOGGER.addHandler(_LIBRDKAFKA_HANDLER)
    else:
        LIBRDKAFKA_LOGGER.removeHandler(_LIBRDKAFKA_HANDLER)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
