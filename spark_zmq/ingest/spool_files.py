"""The spool directory's files outside the segments: privacy, atomic writes, the identity.

Why apart from the log: the spool's directory must be private to its user (0700
directories, 0600 files, never following a symlink planted in place of the directory or
of a file in it) and its small files (``SPOOL_ID``, ``OWNER``) are replaced whole or not
at all. Those rules are file handling, not the log's numbering, and the receiver
processes' parent (``relay.processes``) uses them for directories of its own.
"""

from __future__ import annotations

import os
import stat
import uuid

from ..errors import SparkZmqError
from .spool_format import open_private
from .spool_layout import ID_FILE

__all__ = [
    "ID_FILE",
    "SpoolLockedError",
    "SpoolSecurityError",
    "private_dir",
    "check_ancestors",
    "fsync_dir",
    "write_atomically",
    "read_spool_id",
]


class SpoolLockedError(SparkZmqError, RuntimeError):
    """Another live process owns this spool directory."""

    retriable = True  # the lock is free once its owner exits


class SpoolSecurityError(SparkZmqError, PermissionError):
    """The spool directory (or a file in it) is not private to the user running the query."""


def private_dir(path: str, *, fsync_parent: bool = False) -> None:
    """Create ``path`` (mode 0700) or check an existing one: a real directory (not a
    symlink), owned by this user, under parents no other user can rename it in (see
    ``check_ancestors``); group/other permissions are removed."""
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, mode=0o700, exist_ok=True)
    check_ancestors(path)
    try:
        os.mkdir(path, 0o700)
        if fsync_parent:
            fsync_dir(parent or ".")
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise SpoolSecurityError(
            f"spool directory {path!r} is a symbolic link; the spool refuses to follow it "
            "(someone could have planted it): remove it or choose another 'spoolDir'"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise SpoolSecurityError(f"spool directory {path!r} exists and is not a directory: choose another 'spoolDir'")
    if st.st_uid != os.geteuid():
        raise SpoolSecurityError(
            f"spool directory {path!r} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}): "
            "the spool must be private to the user running the query; choose another 'spoolDir'"
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def check_ancestors(path: str) -> None:
    """Refuse a spool directory that another user could swap.

    The checks on the directory itself (a real directory, ours) hold only while nobody else
    can rename it: whoever may write a directory above it can move the spool aside and put
    a symbolic link to a directory of theirs in its place between two of our operations, and
    then receive (and delete) the segments. So every directory above it must, as OpenSSH's
    ``StrictModes`` asks of a home directory, belong to this user or to root and be
    writable by nobody else, unless it has the sticky bit (``/tmp``), under which another
    user can neither rename nor remove what is ours.
    """
    me = os.geteuid()
    directory = os.path.dirname(os.path.abspath(path))
    while True:
        st = os.stat(directory)
        if st.st_uid not in (me, 0):
            raise SpoolSecurityError(
                f"spool directory {path!r} lies under {directory!r}, which belongs to uid {st.st_uid}: that user "
                "could replace the spool; choose a 'spoolDir' under directories owned by this user or root"
            )
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            raise SpoolSecurityError(
                f"spool directory {path!r} lies under {directory!r}, which others may write "
                f"(mode {stat.S_IMODE(st.st_mode):04o}, no sticky bit): another user could replace the spool; "
                "choose a 'spoolDir' under directories only this user can write, or set the sticky bit on it"
            )
        above = os.path.dirname(directory)
        if above == directory:
            return
        directory = above


def fsync_dir(path: str) -> None:
    """fsync a directory, so the files created, renamed or deleted in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(directory: str, name: str, data: bytes, fsync: bool = True) -> None:
    """Write ``directory/name`` whole or not at all (a private temporary file renamed over
    it), so a crash never leaves a half-written file behind."""
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, os.path.join(directory, name))
    if fsync:
        fsync_dir(directory)


def read_small_private(path: str, limit: int = 64) -> str:
    """The first ``limit`` bytes of a small private file (an id, a token) as stripped text,
    never following a link planted at ``path``; ``OSError`` when it cannot be read."""
    fd = open_private(path, os.O_RDONLY)
    try:
        return os.read(fd, limit).decode("ascii", "replace").strip()
    finally:
        os.close(fd)


def read_spool_id(spool_dir: str) -> str | None:
    """The spool's identity (32 hex digits), ``None`` when there is no readable one."""
    try:
        text = read_small_private(os.path.join(spool_dir, ID_FILE))
    except OSError:
        return None
    try:
        return uuid.UUID(hex=text).hex
    except ValueError:
        return None
