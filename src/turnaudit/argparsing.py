"""The one argparse parser class of the project's command lines."""

from __future__ import annotations

import argparse


class OneLineErrorParser(argparse.ArgumentParser):
    """A wrong argument gets one line saying what is wrong, not the usage text."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")
