"""Files the project writes are its owner's only: mode 0600, folders 0700.

Log files, manifests, review packs, evidence and bundles, replay outputs and
checkpoints, spool and heads files may all hold what a turn said (or, under a
``hash`` policy, keyed hashes of it): none is readable by the machine's other
users. ``TURNAUDIT_FILE_MODE`` (octal, e.g. ``0640`` to let a group read) widens
that for a deployment; it must keep the owner's read and write, may not give
anything to other users, and no execute bit. Folders get the file mode plus
the search bit wherever it gives read (``0640`` -> ``0750``).

The mode is applied with ``fchmod``/``chmod`` after the file is opened, so the
process's umask cannot widen or narrow it, and an existing file written again
is brought back to it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from turnaudit.errors import ConfigurationError

MODE_SETTING = "TURNAUDIT_FILE_MODE"
OWNER_ONLY = 0o600
_OWNER_RW = stat.S_IRUSR | stat.S_IWUSR
_FORBIDDEN = 0o7 | stat.S_IXUSR | stat.S_IXGRP | stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX

# Python open() modes and the os.open flags they stand for.
_FLAGS = {
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
    "r+": os.O_RDWR,
    "w+": os.O_RDWR | os.O_CREAT | os.O_TRUNC,
    "a+": os.O_RDWR | os.O_CREAT | os.O_APPEND,
}


@dataclass(frozen=True)
class FileModes:
    """The mode of files and of folders the project creates."""

    file: int = OWNER_ONLY

    def __post_init__(self) -> None:
        if self.file & _OWNER_RW != _OWNER_RW or self.file & _FORBIDDEN or self.file > 0o777:
            raise ConfigurationError(
                f"{MODE_SETTING}={self.file:04o}: give an octal mode with the owner's read and "
                "write, nothing for other users and no execute bit (0600, 0640 or 0660)"
            )

    @property
    def folder(self) -> int:
        """The file mode plus search (x) wherever it gives read."""
        return self.file | ((self.file & 0o444) >> 2)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FileModes:
        env = os.environ if env is None else env
        raw = env.get(MODE_SETTING, "").strip()
        if not raw:
            return cls()
        try:
            mode = int(raw, 8)
        except ValueError:
            raise ConfigurationError(
                f"{MODE_SETTING}={raw!r} is not an octal mode (e.g. 0600 or 0640)"
            ) from None
        return cls(mode)


@functools.cache
def configured_modes() -> FileModes:
    """``TURNAUDIT_FILE_MODE`` as the process (and its spawned workers) has it; the CLI
    reads it at start, so a bad value fails there with one line."""
    return FileModes.from_env()


def _modes(modes: FileModes | None) -> FileModes:
    return configured_modes() if modes is None else modes


def private_dir(path: Path, modes: FileModes | None = None) -> Path:
    """``path`` and its missing parents created with the folder mode; folders that
    already exist are left as they are (a file's folder may be the working one)."""
    mode = _modes(modes).folder
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            folder.mkdir(mode)
            os.chmod(folder, mode)  # the umask narrowed mkdir's mode
    if not path.is_dir():
        path.mkdir(mode, exist_ok=True)  # raises the usual error for a file in the way
    return path


def private_fd(path: Path | str, flags: int, modes: FileModes | None = None) -> int:
    """``os.open`` with the file mode, then the mode set whatever the umask (and an
    existing file brought back to it)."""
    mode = _modes(modes).file
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            os.fchmod(fd, mode)
    except PermissionError:
        pass  # not its owner: a file someone else made, left as they set it
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private(
    path: Path | str,
    mode: str = "w",
    *,
    encoding: str | None = None,
    modes: FileModes | None = None,
    parents: bool = False,
) -> IO[Any]:
    """``open(path, mode)`` for writing, the file created (or brought back) owner-only.

    ``mode``: ``w``, ``a``, ``x``, ``r+``, ``w+``, ``a+``, with ``b`` for bytes.
    ``parents``: create the missing folders first (with the folder mode).
    """
    flags = _FLAGS.get(mode.replace("b", "").replace("t", ""))
    if flags is None:
        raise ValueError(f"open_private: mode {mode!r} does not write")
    if parents:
        private_dir(Path(path).parent, modes)
    fd = private_fd(path, flags, modes)
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding=encoding or "utf-8")


def write_private(
    path: Path, data: bytes, modes: FileModes | None = None, *, durable: bool = True
) -> None:
    """Replace ``path`` with ``data`` atomically (write, fsync, rename): a reader sees
    the old file or the whole new one, owner-only from its first byte. ``durable``:
    False skips the fsync (a state file a restart does not need)."""
    private_dir(path.parent, modes)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open_private(temporary, "wb", modes=modes) as out:
            out.write(data)
            out.flush()
            if durable:
                os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def make_private(path: Path, modes: FileModes | None = None) -> None:
    """An existing file (one a library wrote: a rotated log) set to the file mode."""
    with contextlib.suppress(FileNotFoundError, PermissionError):
        os.chmod(path, _modes(modes).file)


def read_secret(path: Path, where: str, holds: str, *, limit: int, cannot: str = "") -> bytes:
    """The bytes of a file holding secret keys, refused (one line naming ``where``, never the
    content) when it is not a regular file or group or others may read it: ``holds`` says
    what it holds ("the private key"), ``cannot`` what goes before an open error's reason."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise ConfigurationError(f"{where}: {cannot}{exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigurationError(f"{where}: not a regular file")
        if mode & 0o077:
            raise ConfigurationError(
                f"{where}: {holds} is readable by group or others (mode "
                f"{stat.S_IMODE(mode):04o}): chmod 600 it"
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limit)
    finally:
        os.close(fd)
