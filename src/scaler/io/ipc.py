"""ipc:// addresses the scheduler binds: only its own user may connect, and a path someone else holds is a clear
start-up error, never taken over nor left to hang. The default monitor socket lives in a folder of its user's only
(private_dir), and the programs that read a monitor take the documents' ipc:///tmp/NAME to it (find_monitor). A
scheduler that stops removes the socket files it bound, and that folder if it made it and leaves it empty
(remove_bound_sockets).

libzmq removes whatever is at an ipc path before binding (even another program's live socket) and creates the socket
file with the process's umask. So the path is checked first, and bound with a umask that leaves others out.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import stat
import tempfile
from collections.abc import Iterator


def ipc_path(address: str) -> str | None:
    """The file path of an ipc:// address (None for other transports, and for Linux's abstract names '@...')."""
    scheme, sep, rest = address.partition("://")
    if scheme != "ipc" or not sep or rest.startswith("@"):
        return None
    return rest


_bound: dict[str, tuple[int, int, int]] = {}  # socket path -> (pid that bound it, st_dev, st_ino)
_made: set[str] = set()  # private folders made by this process (or by its parent before it forked this one)


def claim(path: str) -> None:
    """Make `path` free for our socket: a stale socket file of ours (nobody listening) is removed; anything else
    there raises OSError saying what holds it and what to do. Our usual private folder is made again if a scheduler
    that stopped took it away (remove_bound_sockets) since private_dir gave it."""
    folder = os.path.dirname(path)
    if folder in (_runtime_dir(), _tmp_dir()) and not os.path.lexists(folder):
        _made_private(folder)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    me = os.geteuid()
    if info.st_uid != me:
        raise OSError(
            f"{path} already exists and belongs to {_user(info.st_uid)}, not to this user ({_user(me)}): another "
            "user could be listening there in the scheduler's place. Remove it, or choose another address "
            "(--monitor-address for the monitor)"
        )
    if not stat.S_ISSOCK(info.st_mode):
        raise OSError(f"{path} already exists and is not a socket; remove it or choose another address")
    if _listening(path):
        raise OSError(f"{path} is in use: another program (another scheduler?) listens there; choose another address")
    os.unlink(path)


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Files (sockets) created inside this block are readable and writable by this user only. The umask is the
    process's: use it only while no other thread creates files."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def check_private(path: str) -> None:
    """Make sure the socket file at `path` is ours, and mode 0600 (the umask of private_files left it 0700)."""
    info = os.lstat(path)
    if info.st_uid != os.geteuid():
        raise OSError(f"{path} belongs to {_user(info.st_uid)} right after we bound it: someone raced us there")
    if stat.S_IMODE(info.st_mode) != 0o600:
        os.chmod(path, 0o600)
    _bound[path] = (os.getpid(), info.st_dev, info.st_ino)


def remove_bound_sockets() -> list[str]:
    """Remove the socket files this process bound (through check_private) that are still the very files it made,
    then the private folders it made (private_dir) that are left empty; never another process's socket. Call it once
    those sockets are closed (a scheduler that stopped). Returns the paths removed."""
    me = os.getpid()
    removed: list[str] = []
    for path, (pid, device, inode) in list(_bound.items()):
        if pid != me:
            continue
        del _bound[path]
        try:
            info = os.lstat(path)
        except OSError:
            continue
        same = (info.st_dev, info.st_ino) == (device, inode) and stat.S_ISSOCK(info.st_mode)
        if same and info.st_uid == os.geteuid() and not _listening(path):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(path)
    for folder in list(_made):
        with contextlib.suppress(OSError):  # not empty: another socket of this user's is there
            os.rmdir(folder)
            _made.discard(folder)
    return removed


_SEED_FOLDER = "/tmp"  # the documents' monitor address: ipc:///tmp/<host>_<port>_monitor


def private_dir() -> tuple[str, str | None]:
    """A folder for this user's sockets that no other user can write to (created if missing), and why the usual one
    was not used (None when it was). $XDG_RUNTIME_DIR/scaler when $XDG_RUNTIME_DIR is this user's and private (as
    systemd makes it), else $TMPDIR/scaler-<uid> (/tmp/scaler-<uid>). When that one is a symlink, another user's,
    or open to others, it is left alone and a fresh private folder (tempfile.mkdtemp) is returned."""
    runtime = _runtime_dir()
    if runtime is not None and _made_private(runtime) is None:
        return runtime, None
    usual = _tmp_dir()
    problem = _made_private(usual)
    if problem is None:
        return usual, None
    fresh = tempfile.mkdtemp(prefix=f"scaler-{os.geteuid()}-")
    _made.add(fresh)
    return fresh, f"{usual} {problem}"


def usual_private_dir() -> str | None:
    """private_dir's folder when it is a usual one ($XDG_RUNTIME_DIR/scaler, $TMPDIR/scaler-<uid>), the same for
    every process of this user (made if missing); None when neither is private (no fresh folder is made)."""
    runtime = _runtime_dir()
    if runtime is not None and _made_private(runtime) is None:
        return runtime
    usual = _tmp_dir()
    return usual if _made_private(usual) is None else None


def find_monitor(address: str) -> str:
    """The monitor address to read, for `address` as a user gives it to scaler_top, scaler_ui or the joblib backend.

    The documents' ipc:///tmp/NAME (or $TMPDIR/NAME) becomes NAME in this user's private folders when a socket of
    ours is there ($XDG_RUNTIME_DIR/scaler, /tmp/scaler-<uid>, the fresh /tmp/scaler-<uid>-* folders, or /tmp/NAME
    itself; the one a scheduler listens on first). Any other ipc path that exists must be this user's socket: another
    user's raises ValueError (it may serve a false status), and so does a file that is not a socket. tcp:// addresses,
    and ipc paths that do not exist (a scheduler that is starting), are returned as they are; the documents' form then
    names NAME in the private folder where this user's scheduler binds it, when no other user can make files there."""
    path = ipc_path(address)
    if path is None:
        return address
    name = _seed_name(path)
    if name is not None:
        found = _private_socket(name, path)
        if found is not None:
            return f"ipc://{found}"
    try:
        info = os.lstat(path)  # a symlink is not followed: whoever made it chose where it leads
    except FileNotFoundError:
        later = _future_place(name) if name is not None else None
        return f"ipc://{later}" if later is not None else address
    if info.st_uid != os.geteuid():
        raise ValueError(
            f"{address} belongs to {_user(info.st_uid)}, not to you: it is not your scheduler's monitor (another user "
            "may serve a false status); the scheduler logs its monitor address at start"
        )
    if not stat.S_ISSOCK(info.st_mode):
        raise ValueError(
            f"{address} is not a socket: it is not a scheduler's monitor; the scheduler logs its monitor address at "
            "start"
        )
    return address


def _runtime_dir() -> str | None:
    """$XDG_RUNTIME_DIR/scaler when $XDG_RUNTIME_DIR is a folder of this user's only (None otherwise)."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if not os.path.isabs(base):  # unset, or relative: to be ignored, says the XDG Base Directory spec
        return None
    try:
        info = os.lstat(base)
    except OSError:
        return None
    return os.path.join(base, "scaler") if _problem(info) is None else None


def _tmp_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"scaler-{os.geteuid()}")


def _made_private(path: str) -> str | None:
    """Make `path` a folder, mode 0700, unless something is there; None when it is then this user's private folder,
    else what it is instead. Checked on the folder opened without following a symlink: no race with a swap."""
    try:
        os.mkdir(path, 0o700)
        created = True
    except FileExistsError:
        created = False
    except OSError as exc:
        return f"cannot be made ({exc.strerror or exc})"
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:  # a symlink (ELOOP), not a folder (ENOTDIR), gone, or not ours to open
        try:
            return _problem(os.lstat(path)) or f"cannot be opened ({exc.strerror or exc})"
        except OSError:
            return f"cannot be opened ({exc.strerror or exc})"
    try:
        info = os.fstat(descriptor)
        problem = _problem(info)
        if problem is None and created:
            _made.add(path)
            if stat.S_IMODE(info.st_mode) != 0o700:
                os.fchmod(descriptor, 0o700)  # a umask took bits of the owner's
        return problem
    finally:
        os.close(descriptor)


def _problem(info: os.stat_result) -> str | None:
    """What keeps the file `info` describes from being a private folder of this user's (None: nothing)."""
    me = os.geteuid()
    owner = f"owned by {_user(info.st_uid)}"
    if stat.S_ISLNK(info.st_mode):
        return f"is a symbolic link ({owner})"
    if not stat.S_ISDIR(info.st_mode):
        return f"is not a directory ({owner})"
    if info.st_uid != me:
        return f"belongs to {_user(info.st_uid)}, not to this user ({_user(me)})"
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        return f"is open to other users (mode {mode:04o}; {owner})"
    return None


def _seed_name(path: str) -> str | None:
    """NAME when `path` is /tmp/NAME or $TMPDIR/NAME: the documents' form, which find_monitor looks up."""
    folder, name = os.path.split(path)
    if name and os.path.normpath(folder) in (_SEED_FOLDER, os.path.normpath(tempfile.gettempdir())):
        return name
    return None


def _private_folders() -> list[str]:
    """This user's private socket folders that exist, in private_dir's order: $XDG_RUNTIME_DIR/scaler,
    $TMPDIR/scaler-<uid>, then the fresh ones made when that one was not ours (newest first)."""
    runtime, usual = _runtime_dir(), _tmp_dir()
    parent, prefix = os.path.split(usual)
    try:
        with os.scandir(parent) as entries:
            fresh = [entry.path for entry in entries if entry.name.startswith(prefix + "-")]
    except OSError:
        fresh = []
    fresh.sort(key=_modified, reverse=True)
    return [folder for folder in [*([runtime] if runtime else []), usual, *fresh] if _is_private(folder)]


def _private_socket(name: str, given: str) -> str | None:
    """NAME in this user's private folders, or `given` (the documents' path) when it is a socket of ours: the first
    a scheduler listens on, else the first there."""
    paths = [os.path.join(folder, name) for folder in _private_folders()] + [given]
    found = [path for path in paths if _socket_of_ours(path)]
    if len(found) < 2:
        return found[0] if found else None
    return next((path for path in found if _listening(path)), found[0])


def _socket_of_ours(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(info.st_mode) and info.st_uid == os.geteuid()


def _future_place(name: str) -> str | None:
    """Where this user's scheduler will bind NAME, if no other user can create files there: in a private
    $XDG_RUNTIME_DIR (its scaler folder made or not yet), else in /tmp/scaler-<uid> if it is there and private."""
    runtime = _runtime_dir()
    if runtime is not None and (not os.path.lexists(runtime) or _is_private(runtime)):
        return os.path.join(runtime, name)
    usual = _tmp_dir()
    return os.path.join(usual, name) if _is_private(usual) else None


def _is_private(folder: str) -> bool:
    try:
        return _problem(os.lstat(folder)) is None
    except OSError:
        return False


def _modified(path: str) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def _listening(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
