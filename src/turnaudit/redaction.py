"""Surface redaction: what every writer puts out for surface texts and tool I/O.

A turn's surface texts (``surface``, ``walk_surface``, ``articulation_surface``,
``input_tokens``) and its tool calls' ``arguments`` and ``result`` may hold user
content (a card number a tool was called with). One policy, ``TURNAUDIT_LOG_SURFACES``
(or its general name ``TURNAUDIT_SURFACES``), says what every writer does with them:
the log sink's lines, the HTIR traces on the traces topic, the feeder's eval
manifests and what is built from them (review packs, bundles, evidence), and replay
outputs. Pure: no I/O.

* ``drop`` (the default): not written at all (a JSON writer writes ``null`` where a
  field must stay, a trace leaves the step's field out);
* ``hash``: ``hmac-sha256:<hex>`` of the text, keyed with ``TURNAUDIT_LOG_HASH_KEY``:
  equal texts stay comparable, the text cannot be read back without the key;
* ``keep``: the text itself (``full`` is accepted as its older name).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnaudit.errors import ConfigurationError

ENV_PREFIX = "TURNAUDIT_"
POLICY_SETTING = "LOG_SURFACES"
GENERAL_POLICY_SETTING = "SURFACES"  # the same policy under its general name
KEY_SETTING = "LOG_HASH_KEY"
HASH_PREFIX = "hmac-sha256:"
_HASHED = re.compile(r"hmac-sha256:[0-9a-f]{64}")
# The surface texts of a TurnEvent (input tokens apart: a list, hashed as one text).
SURFACE_FIELDS = ("surface", "walk_surface", "articulation_surface")
TOKENS_FIELD = "input_tokens"
TOOL_IO_FIELDS = ("arguments", "result")
# Tokens joined with a separator no token contains, so the hash is of one text.
TOKEN_SEPARATOR = "\x1f"  # noqa: S105 - a separator, not a password


class SurfacePolicy(enum.StrEnum):
    """What a writer puts out for a surface text or a tool's arguments and result."""

    DROP = "drop"  # not written at all (the default)
    HASH = "hash"  # HMAC-SHA256 with a key from the settings: equal texts stay comparable
    KEEP = "keep"  # the text itself

    @classmethod
    def _missing_(cls, value: object) -> SurfacePolicy | None:
        return cls.KEEP if value == "full" else None  # the log sink's older name for keep


@dataclass(frozen=True)
class Redaction:
    """A policy and its key; ``text``, ``tokens``, ``event`` and ``tool_io`` apply it."""

    policy: SurfacePolicy = SurfacePolicy.DROP
    key: bytes = b""

    def __post_init__(self) -> None:
        if self.policy is SurfacePolicy.HASH and not self.key:
            raise ConfigurationError(
                f"{ENV_PREFIX}{POLICY_SETTING}=hash needs a key in {ENV_PREFIX}{KEY_SETTING}"
            )

    def __repr__(self) -> str:  # the key stays out of logs and tracebacks
        return f"Redaction({self.policy.value})"

    @classmethod
    def keep(cls) -> Redaction:
        return cls(SurfacePolicy.KEEP)

    @property
    def label(self) -> str:
        """The policy, and for ``hash`` which key (an HMAC of a constant, not the key):
        two outputs with equal labels hold comparable texts."""
        if self.policy is not SurfacePolicy.HASH:
            return self.policy.value
        key_id = hmac.new(self.key, b"turnaudit surface key id", hashlib.sha256).hexdigest()
        return f"hash:{key_id[:16]}"

    @property
    def writes(self) -> bool:
        """Whether anything is written for a surface (hashed or kept)."""
        return self.policy is not SurfacePolicy.DROP

    def text(self, value: str) -> str | None:
        """The text as written: None (dropped), its keyed hash, or itself.

        Hashing is idempotent: a value that already is a hash (a trace redacted
        upstream) is written as it is, so a second writer under the same policy
        does not change it.
        """
        if self.policy is SurfacePolicy.KEEP:
            return value
        if self.policy is SurfacePolicy.DROP:
            return None
        if _HASHED.fullmatch(value):
            return value
        return HASH_PREFIX + hmac.new(self.key, value.encode(), hashlib.sha256).hexdigest()

    def tokens(self, tokens: Sequence[str]) -> str | list[str] | None:
        """Input tokens as written: dropped, one hash of them joined, or the list."""
        if self.policy is SurfacePolicy.KEEP:
            return list(tokens)
        return self.text(TOKEN_SEPARATOR.join(tokens))

    def event(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """A decoded TurnEvent as a JSON writer puts it out: a shallow copy with its
        surfaces and tool I/O redacted (``null`` when dropped); the rest unchanged."""
        out = dict(event)
        if self.policy is SurfacePolicy.KEEP:
            return out
        for name in SURFACE_FIELDS:
            if isinstance(out.get(name), str):
                out[name] = self.text(out[name])
        if isinstance(out.get(TOKENS_FIELD), list):
            out[TOKENS_FIELD] = self.tokens(out[TOKENS_FIELD])
        if isinstance(out.get("tool_steps"), list):
            out["tool_steps"] = [self.tool_io(step) for step in out["tool_steps"]]
        return out

    def tool_io(self, call: Mapping[str, Any]) -> dict[str, Any]:
        """A tool call (or an HTIR tool step, or a reviewer's tool context) with its
        arguments and result redacted: a dropped one becomes ``null``."""
        out = dict(call)
        for name in TOOL_IO_FIELDS:
            value = out.get(name)
            if isinstance(value, str):
                out[name] = self.text(value)
            elif value is not None and self.policy is not SurfacePolicy.KEEP:
                out[name] = None  # not text: nothing safe to hash it as
        return out


DROPPED = Redaction()  # the default: nothing of a surface or a tool's I/O is written


def surface_redaction(env: Mapping[str, str] | None = None) -> Redaction:
    """The policy from ``TURNAUDIT_LOG_SURFACES`` (or ``TURNAUDIT_SURFACES``; both set:
    they must agree) and ``TURNAUDIT_LOG_HASH_KEY``; one line on a bad value."""
    env = os.environ if env is None else env
    named = {
        name: value.strip()
        for name in (POLICY_SETTING, GENERAL_POLICY_SETTING)
        if (value := env.get(ENV_PREFIX + name)) is not None and value.strip()
    }
    if len(set(named.values())) > 1:
        raise ConfigurationError(
            f"{ENV_PREFIX}{POLICY_SETTING}={named[POLICY_SETTING]!r} and "
            f"{ENV_PREFIX}{GENERAL_POLICY_SETTING}={named[GENERAL_POLICY_SETTING]!r} disagree: "
            "set one"
        )
    setting, text = next(iter(named.items()), (POLICY_SETTING, SurfacePolicy.DROP.value))
    try:
        policy = SurfacePolicy(text)
    except ValueError:
        choices = "|".join(p.value for p in SurfacePolicy)
        raise ConfigurationError(f"{ENV_PREFIX}{setting}={text!r}: choose {choices}") from None
    return Redaction(policy, env.get(ENV_PREFIX + KEY_SETTING, "").strip().encode())
