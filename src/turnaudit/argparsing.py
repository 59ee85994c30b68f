"""The one argparse parser class of the project's command lines."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


class OneLineErrorParser(argparse.ArgumentParser):
    """A wrong argument gets one line saying what is wrong, not the usage text."""

    _argv: list[str] | None = None

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> argparse.Namespace:
        self._argv = list(sys.argv[1:] if args is None else args)
        parsed: argparse.Namespace = super().parse_args(args, namespace)
        return parsed

    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse names a missing command before an unknown option; the
        # unknown option is what the user got wrong.
        if self._argv is not None and "arguments are required" in message:
            unknown = [
                a
                for a in self._argv
                if a.startswith("-") and a.split("=")[0] not in self._option_string_actions
            ]
            if unknown and not any(not a.startswith("-") for a in self._argv):
                message = f"unrecognized arguments: {' '.join(unknown)}"
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value
