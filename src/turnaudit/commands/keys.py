"""``turnaudit keys generate``: a new Ed25519 key pair for signed checkpoints.

Writes ``<DIR>/<ID>.key`` (the private key, owner-only: give it to the runtime as
``TURNAUDIT_SIGNING_KEY_FILE``, with ``TURNAUDIT_SIGNING_KEY_ID=<ID>``) and
``<DIR>/<ID>.pub``, and prints the lines to add to verify's keyring (docs/trust.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from turnaudit.signing_keys import generate_keys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("keys", help="signing keys for signed checkpoints")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    generate = actions.add_parser(
        "generate", help="write a new Ed25519 key pair and print its keyring entry"
    )
    generate.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="folder for <ID>.key (mode 0600) and <ID>.pub",
    )
    generate.add_argument(
        "--key-id",
        required=True,
        metavar="ID",
        help="the key's id: in every checkpoint it signs and in the keyring",
    )
    generate.set_defaults(handler=_generate)


def _generate(args: argparse.Namespace) -> int:
    made = generate_keys(args.out, args.key_id)
    print(f"# private key: {made.private_path} (owner-only; TURNAUDIT_SIGNING_KEY_FILE)")
    print(f"# public key: {made.public_path}")
    print("# add to verify's keyring (--keyring FILE):")
    print(made.keyring_entry, end="")
    return 0
