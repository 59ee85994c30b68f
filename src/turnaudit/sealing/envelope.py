"""Sealing and opening a turn's surfaces: AES-256-GCM under the session's data key.

What is sealed: ``surface``, ``walk_surface``, ``articulation_surface``, every input
token, and every tool step's ``arguments`` and ``result``, in that order, as one blob:
the texts in UTF-8 joined by a 0xFF byte, which UTF-8 never holds (the order binds each
text to its field name; the turn's counts of tokens and steps, to how many there are).
The associated data binds the blob to its turn: the event id, session, producer id,
sequence and data key id, so a sealed field copied into another turn (or position) does
not open there.

In the turn as written, each sealed text is empty, except the runtime's fixed stub text
(``UNKNOWN_DOMAIN_SURFACE``, no one's words), left in the clear so that every reader
can still check a stub turn's contract. The number of input tokens and tool steps stays
visible. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from turnaudit.events import OutgoingTurnEvent, TurnEvent
from turnaudit.verdicts import UNKNOWN_DOMAIN_SURFACE

_CONTEXT = b"turnaudit.sealed.v1\x00"
_TEXT = "surrogatepass"  # any str seals: a lone surrogate too (Avro could not carry it)

# Why a reader sees a placeholder instead of the text (a bounded set: metric labels).
SealedReason = Literal[
    "no_keyring",  # the reader holds no surface keyring
    "key_erased",  # the data key is not (or no longer) on <prefix>surface-keys
    "kek_unknown",  # the data key's KEK is not in the reader's keyring
    "key_tampered",  # the wrapped data key does not open under its KEK
    "tampered",  # the sealed blob does not open in this turn
    "malformed",  # it opened but does not hold the turn's fields
]
SEALED_REASONS: tuple[SealedReason, ...] = (
    "no_keyring",
    "key_erased",
    "kek_unknown",
    "key_tampered",
    "tampered",
    "malformed",
)


@dataclass(frozen=True, slots=True)
class Surfaces:
    """The texts sealing covers, by field."""

    surface: str
    walk_surface: str
    articulation_surface: str
    input_tokens: tuple[str, ...] = ()
    tool_texts: tuple[tuple[str, str], ...] = ()  # (arguments, result) per tool step

    def texts(self) -> Iterable[str]:
        yield self.surface
        yield self.walk_surface
        yield self.articulation_surface
        yield from self.input_tokens
        for arguments, result in self.tool_texts:
            yield arguments
            yield result


@dataclass(frozen=True, slots=True)
class Opened:
    """The turn's sealed surfaces, opened (and written back into the event)."""

    surfaces: Surfaces


@dataclass(frozen=True, slots=True)
class Sealed:
    """The surfaces stay sealed for this reader, and why; the event shows placeholders."""

    reason: SealedReason


SealState = Opened | Sealed


class OpenFailedError(Exception):
    def __init__(self, reason: SealedReason) -> None:
        super().__init__(reason)
        self.reason: SealedReason = reason


def placeholder(reason: SealedReason) -> str:
    """What a reader without the text shows in a sealed field."""
    return f"[sealed: {reason}]"


_SEPARATOR = b"\xff"  # a byte UTF-8 never holds (nor does surrogatepass write it)


def _framed(texts: list[str]) -> bytes:
    """The texts in UTF-8, each after the one before it and a 0xFF byte: one join, and
    (for a known count of texts) one way to read them back."""
    # Joined by NUL and encoded once, then each 0x00 byte made 0xFF: the same bytes, as
    # UTF-8 (and surrogatepass) writes 0x00 for U+0000 only, and the count shows that no
    # text holds one. One encode a turn instead of one a text (each ~80 ns).
    joined = "\x00".join(texts)
    if joined.count("\x00") == len(texts) - 1:
        try:
            # The strict encoder is the fast one (an error handler named costs ~1 µs a call).
            return joined.encode().replace(b"\x00", _SEPARATOR)
        except UnicodeEncodeError:
            return joined.encode("utf-8", _TEXT).replace(b"\x00", _SEPARATOR)
    return _SEPARATOR.join([_utf8(t) for t in texts])


def _utf8(text: str) -> bytes:
    """One text as ``_framed`` writes it."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", _TEXT)


def _aad_tail(session_id: str, producer_id: str, data_key_id: str) -> bytes:
    """The associated data between the event id and the sequence (0xFF first): the same
    for every turn a producer seals in a session under one data key."""
    return _framed(["", session_id, producer_id, data_key_id])


def _aad(event_id: str, tail: bytes, sequence: int) -> bytes:
    return _CONTEXT + _utf8(event_id) + tail + sequence.to_bytes(8, "big", signed=True)


def turn_aad(
    event_id: str, session_id: str, producer_id: str, sequence: int, data_key_id: str
) -> bytes:
    """What a sealed blob is bound to: the context, the event id, session, producer id and
    data key id framed as the texts are, then the sequence (8 bytes, big-endian, signed)."""
    return _aad(event_id, _aad_tail(session_id, producer_id, data_key_id), sequence)


def _aad_of(event: OutgoingTurnEvent | TurnEvent, data_key_id: str) -> bytes:
    return turn_aad(
        event["event_id"],
        event["session_id"],
        event["producer_id"],
        event["sequence"],
        data_key_id,
    )


def _texts_of(event: OutgoingTurnEvent | TurnEvent) -> list[str]:
    """The sealed texts of a turn in their order (``Surfaces.texts``), without the tuples."""
    texts = [
        event["surface"],
        event["walk_surface"],
        event["articulation_surface"],
        *event["input_tokens"],
    ]
    steps = event.get("tool_steps")
    if steps:
        for step in steps:
            texts += (step["arguments"], step["result"])
    return texts


def unpack(blob: bytes, tokens: int, tool_steps: int) -> Surfaces:
    """The surfaces ``pack`` wrote for a turn of ``tokens`` input tokens and ``tool_steps``
    steps; ``OpenFailedError`` ("malformed") for anything else."""
    parts = blob.split(_SEPARATOR)
    if len(parts) != 3 + tokens + 2 * tool_steps:
        raise OpenFailedError("malformed")
    try:
        texts = [part.decode("utf-8", _TEXT) for part in parts]
    except UnicodeDecodeError:
        raise OpenFailedError("malformed") from None
    first_tool = 3 + tokens
    tools = tuple((texts[i], texts[i + 1]) for i in range(first_tool, len(texts), 2))
    return Surfaces(texts[0], texts[1], texts[2], tuple(texts[3:first_tool]), tools)


def surfaces_of(event: OutgoingTurnEvent | TurnEvent) -> Surfaces:
    return Surfaces(
        event["surface"],
        event["walk_surface"],
        event["articulation_surface"],
        tuple(event["input_tokens"]),
        tuple((step["arguments"], step["result"]) for step in event.get("tool_steps", ())),
    )


def write_surfaces(event: OutgoingTurnEvent | TurnEvent, surfaces: Surfaces) -> None:
    """The texts into the event's fields (its tool steps copied, never written in place)."""
    event["surface"] = surfaces.surface
    event["walk_surface"] = surfaces.walk_surface
    event["articulation_surface"] = surfaces.articulation_surface
    event["input_tokens"] = list(surfaces.input_tokens)
    steps = event.get("tool_steps")
    if steps:
        event["tool_steps"] = [
            {**step, "arguments": arguments, "result": result}
            for step, (arguments, result) in zip(steps, surfaces.tool_texts, strict=True)
        ]


class TurnSealer:
    """Seals turns under one data key: its AES-GCM object made once, and the associated
    data's tail (``_aad_tail``) once per session and producer it sees in a row."""

    __slots__ = ("_aead", "_tail", "data_key_id")

    def __init__(self, aead: AESGCM, data_key_id: str) -> None:
        self._aead, self.data_key_id = aead, data_key_id
        self._tail: tuple[str, str, bytes] | None = None  # (session, producer, tail)

    def seal(self, event: OutgoingTurnEvent, nonce: bytes) -> None:
        """Seal a stamped event in place under ``nonce`` (random, never used with this
        key before): ``sealed`` set, the plaintext fields emptied."""
        session, producer = event["session_id"], event["producer_id"]
        tail = self._tail
        if tail is None or tail[0] != session or tail[1] != producer:
            tail = self._tail = (session, producer, _aad_tail(session, producer, self.data_key_id))
        aad = _aad(event["event_id"], tail[2], event["sequence"])
        ciphertext = self._aead.encrypt(nonce, _framed(_texts_of(event)), aad)
        public = UNKNOWN_DOMAIN_SURFACE
        if event["surface"] != public:
            event["surface"] = ""
        if event["walk_surface"] != public:
            event["walk_surface"] = ""
        if event["articulation_surface"] != public:
            event["articulation_surface"] = ""
        if tokens := event["input_tokens"]:
            event["input_tokens"] = [""] * len(tokens)
        if steps := event.get("tool_steps"):
            event["tool_steps"] = [{**step, "arguments": "", "result": ""} for step in steps]
        event["sealed"] = {
            "data_key_id": self.data_key_id,
            "nonce": nonce,
            "ciphertext": ciphertext,
        }


def open_event(event: TurnEvent, aead: AESGCM) -> Surfaces:
    """The surfaces sealed in ``event`` (not written back); ``OpenFailedError`` when they
    do not open in this turn ("tampered") or do not fit it ("malformed")."""
    sealed = event["sealed"]
    assert sealed is not None
    try:
        blob = aead.decrypt(
            sealed["nonce"], sealed["ciphertext"], _aad_of(event, sealed["data_key_id"])
        )
    except (InvalidTag, ValueError):
        raise OpenFailedError("tampered") from None
    return unpack(blob, len(event["input_tokens"]), len(event.get("tool_steps", ())))


def cover_sealed(event: TurnEvent, reason: SealedReason) -> None:
    """A reader without the text: each sealed field shows ``placeholder(reason)``."""
    write_surfaces(event, _covered(surfaces_of(event), placeholder(reason)))


def _covered(surfaces: Surfaces, text: str) -> Surfaces:
    """Every text as ``text``, but the public stub text (left in the clear)."""

    def cover(value: str) -> str:
        return value if value == UNKNOWN_DOMAIN_SURFACE else text

    return Surfaces(
        cover(surfaces.surface),
        cover(surfaces.walk_surface),
        cover(surfaces.articulation_surface),
        tuple(text for _ in surfaces.input_tokens),
        tuple((text, text) for _ in surfaces.tool_texts),
    )
