"""Writing pipecheck's files (reports, baselines): regular files only, replaced atomically.

A path given for a report or a baseline may name anything: a symlink into someone else's tree, a
FIFO (whose reader would block the run), a device node. Replacing such a thing silently destroys
it, and writing through it writes where nobody asked. So a file is written only where nothing is
yet, or where a regular file is; anything else is an :class:`UnsafePathError` naming the path and
what is there. The text goes to a temporary file in the same directory, is fsynced, and replaces
the target with ``os.replace``: a reader sees the old file or the new one, never a torn one.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable

__all__ = ["UnsafePathError", "atomic_write_text", "describe_non_regular", "refuse_non_regular"]


class UnsafePathError(OSError):
    """The path names something other than a regular file (a symlink, FIFO, device, directory)."""


def describe_non_regular(path: str) -> str | None:
    """What is at ``path`` when it is neither absent nor a regular file (``None`` otherwise).

    Symlinks are not followed: a symlink is reported as one, whatever it points at.
    """
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None  # nothing there (what is wrong with its directory is the writer's error)
    except OSError as exc:
        return f"not accessible ({exc.strerror or exc})"
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(path)!r})"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def refuse_non_regular(path: str, what: str) -> None:
    """Raise :class:`UnsafePathError` when ``path`` exists and is not a regular file."""
    found = describe_non_regular(path)
    if found is not None:
        raise UnsafePathError(
            f"{what} {path!r} is {found}; pipecheck writes regular files only and leaves anything else "
            "untouched: give the path of a regular file (or of none)"
        )


def atomic_write_text(
    path: str,
    text: str,
    what: str = "file",
    *,
    refuse: Callable[[str], None] | None = None,
    make_dirs: bool = True,
    no_temp_file: Callable[[str, OSError], Exception] | None = None,
) -> None:
    """Write ``text`` to ``path`` atomically, as a regular file.

    Raises :class:`UnsafePathError` when ``path`` is a symlink, FIFO, device, directory or anything
    but a regular file, and ``OSError`` when the directory cannot be created or written. A file
    that exists keeps its permission bits; a new one gets what ``open()`` would give it. Nothing is
    left half-written.

    A caller with its own error type passes ``refuse`` (called with the path before writing and
    again just before the rename; it raises when the path is unsafe) and ``no_temp_file`` (makes the
    exception to raise when no temporary file can be created in the directory, from the directory and
    the ``OSError``); ``make_dirs=False`` leaves a missing directory an error.
    """
    check = refuse if refuse is not None else (lambda p: refuse_non_regular(p, what))
    check(path)
    directory = os.path.dirname(os.path.abspath(path))
    if make_dirs:
        os.makedirs(directory, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    except OSError as exc:
        if no_temp_file is None:
            raise
        raise no_temp_file(directory, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            mode = os.stat(path, follow_symlinks=False).st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask  # mkstemp creates 0600; a new file gets what open() would give it
        os.chmod(tmp, mode)
        # checked again just before the rename: something may have appeared meanwhile
        check(path)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where the OS allows
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
