"""Which failures to read key files mean "removed", and who may own the keys: the checks keys.py makes before it
trusts a key folder or file (as OpenSSH's StrictModes). Reads owners and modes; writes nothing.
"""

from __future__ import annotations

import errno
import os
import stat

from scaler.errors import KeysError

_GONE = frozenset({errno.ENOENT, errno.ENOTDIR})  # the errors that mean "not there": a real removal
_OWNERS = hasattr(os, "geteuid")  # POSIX owners and modes: what the ownership checks look at


class KeysUnreadable(OSError):
    """Key files or folders that cannot be read now, for a reason other than their removal: descriptors used up
    (EMFILE, ENFILE), no permission, an I/O error... Who is admitted must not change on it: the scheduler keeps the
    keys it has and tries again. str() names the path, what could not be done and why."""

    def __init__(self, path: str, doing: str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), path)
        self.doing = doing

    def __str__(self) -> str:
        return f"{self.filename} cannot be {self.doing} ({self.strerror})"


def unless_gone(exc: OSError, path: str, doing: str) -> None:
    """The one place that tells a removal from a read that failed. Returns when `path` is not there (ENOENT,
    ENOTDIR): it was removed, and what it held no longer counts. Raises KeysUnreadable for any other error (EMFILE,
    ENFILE, EINTR, EAGAIN, ENOMEM, ENOBUFS, EACCES, EIO, ELOOP...): the keys may well be there, so nothing changes."""
    if exc.errno in _GONE:
        return
    raise KeysUnreadable(path, doing, exc) from exc


def checked(path: str, subject: str) -> os.stat_result | None:
    """The stat of a folder (or the keys directory), None if it is not there; KeysError if another user could
    change it (_check_private); KeysUnreadable if it cannot be looked at now."""
    try:
        found = os.stat(path)
    except OSError as exc:
        unless_gone(exc, path, "reached")
        return None
    check_private(path, found, subject)
    return found


def checked_keys_directory(root: str) -> os.stat_result | None:
    """The keys directory's stat (None if it is not there), once it and every directory above it up to / (as given
    and as its symlinks resolve) are checked: each must be this user's or root's and not writable by group or
    others, except root's sticky directories such as /tmp, where others may add files but not replace ours."""
    found = checked(root, f"the keys directory {root}")
    for parent in parents(root):
        try:
            parent_stat = os.stat(parent)
        except OSError as exc:
            unless_gone(exc, parent, "reached")
            continue
        if parent_stat.st_uid == 0 and parent_stat.st_mode & stat.S_ISVTX:
            continue
        check_private(parent, parent_stat, f"the directory {parent} above the keys directory {root}")
    return found


def parents(root: str) -> list[str]:
    """The directories above `root` up to /, as given and as resolved through symlinks, each once."""
    found: dict[str, None] = {}
    for path in (root, os.path.realpath(root)):
        parent = os.path.dirname(path)
        while parent not in found:
            found[parent] = None
            parent = os.path.dirname(parent)
    return list(found)


def check_private(path: str, found: os.stat_result, subject: str) -> None:
    """KeysError unless `path` belongs to this user or root and neither its group nor others may write to it (as
    OpenSSH's StrictModes): otherwise another user could put their own key in, or change ours. The message names the
    path (`subject` says what it is), its owner and mode, and the fix."""
    if not _OWNERS:
        return
    mode = stat.S_IMODE(found.st_mode)
    me = os.geteuid()
    if found.st_uid not in (me, 0):
        owners = "root" if me == 0 else f"you ({_user(me)}) or root"
        why = f"belongs to {_owner(found.st_uid)}, not to {owners} (mode {mode:04o})"
        fix = f"chown {_user(me)} {path}"
    elif mode & 0o022:
        whom = {0o022: "its group and others", 0o020: "its group", 0o002: "others"}[mode & 0o022]
        why = f"is writable by {whom} (owner {_owner(found.st_uid)}, mode {mode:04o})"
        fix = f"chmod go-w {path}"
    else:
        return
    raise KeysError(
        f"{subject} {why}: another user could change the keys Scaler trusts. Fix: {fix}, or make the keys elsewhere "
        "with scaler_keygen, in a directory only you can write to"
    )


def _user(uid: int) -> str:
    try:
        import pwd  # POSIX only, as are the owners checked

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def _owner(uid: int) -> str:
    name = _user(uid)
    return f"uid {uid}" if name == str(uid) else f"{name} (uid {uid})"
