"""The ``turnaudit`` command (and ``python -m turnaudit``).

The native module is checked before anything imports it: an install without it (a
wheel for another platform, a checkout never built) gets one line saying what to do,
exit 2, instead of a traceback from whichever command imported it first.
"""

from __future__ import annotations

import sys

NATIVE_MISSING = (
    "turnaudit: its native module (turnaudit._native) is missing or unusable ({reason}): "
    "install the turnaudit wheel for this platform (`make dist` builds it), "
    "or in a checkout run `make setup`"
)
USAGE_EXIT = 2


def main() -> int:
    try:
        from turnaudit import _native  # noqa: F401, PLC0415 - checked before the CLI loads
    except ImportError as exc:
        print(NATIVE_MISSING.format(reason=" ".join(str(exc).split())), file=sys.stderr)
        return USAGE_EXIT
    from turnaudit.cli import main as cli_main  # noqa: PLC0415 - after the check above

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
