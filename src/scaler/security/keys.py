"""CurveZMQ key files: the directory layout scaler_keygen writes, and reading it back for each role.

The scheduler needs its key pair and the public keys it admits; a client, a worker, a worker manager or a monitor
viewer needs the scheduler's public key and its own key pair. Keys another user could change are refused (as
OpenSSH's StrictModes does), and a key that cannot be read now is told apart from one that was removed
(`_unless_gone`). This module reads and writes key files; no sockets (the I/O shells turn what it returns into
socket options).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import zmq
import zmq.auth

from scaler.errors import KeysError
from scaler.security.ownership import (
    KeysUnreadable,
    check_private,
    checked,
    checked_keys_directory,
    parents,
    unless_gone,
)

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

ENV_VAR = "SCALER_KEYS"
ROLES = ("client", "worker", "monitor", "manager")

SCHEDULER_PUBLIC = "scheduler.key"
SCHEDULER_SECRET = "scheduler.key_secret"
AUTHORIZED = {
    "client": "authorized_clients",
    "worker": "authorized_workers",
    "monitor": "authorized_monitors",
    "manager": "authorized_managers",
}
PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_RESERVED = frozenset({"scheduler", *ROLES, *AUTHORIZED.values()})
_Z85 = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")
_PUBLIC_MODE = 0o644
_SECRET_MODE = 0o600
_SECRET_FOLDER_MODE = 0o700  # DIR and DIR/NAME hold secrets
_PUBLIC_FOLDER_MODE = 0o755  # authorized_* hold public keys only
_WHY = {  # after a role's files in the report's "which file goes where"; {worker}: the path of worker.key_secret
    "client": "",
    "worker": "",
    "monitor": " (to run scaler_top or scaler_ui on a tcp:// monitor address)",
    "manager": " (to run scaler_worker_manager), and {worker} for the workers its units run",
}
_HOLDERS = {
    "client": "machines that run clients",
    "worker": "machines that run workers",
    "monitor": "machines that run scaler_top or scaler_ui on a tcp:// monitor address",
    "manager": "machines that run worker managers (scaler_worker_manager)",
}


@dataclass(frozen=True)
class KeyPair:
    """A CurveZMQ key pair, both halves in Z85 (40 bytes each). Its repr never shows the secret."""

    public: bytes
    secret: bytes = field(repr=False)


@dataclass(frozen=True)
class PeerKeys:
    """What a client, a worker, a worker manager or a monitor viewer needs to connect to the scheduler."""

    server_public: bytes
    pair: KeyPair
    role: str
    source: str


@dataclass(frozen=True)
class AuthorizedKey:
    """A public key the scheduler admits: from which folder (role), under which file name."""

    role: str
    name: str
    public: bytes
    path: str


@dataclass(frozen=True)
class ServerKeys:
    """The scheduler's key pair, and the directory its authorized_* folders are in."""

    pair: KeyPair
    directory: str


class _BadKeyFile(Exception):
    """A key file that is missing or unusable; str() says why, to follow the file's path."""


# ---- reading -------------------------------------------------------------------------------------------------------


def resolve(keys: str | os.PathLike[str] | None) -> str | None:
    """The keys directory to use: `keys` if given, else $SCALER_KEYS if set and not empty, else None (no keys)."""
    given = os.fspath(keys) if keys is not None else ""
    chosen = given or os.environ.get(ENV_VAR, "")
    return os.path.expanduser(chosen) if chosen else None


def load_peer_keys(directory: str | os.PathLike[str], role: str) -> PeerKeys:
    """scheduler.key and <role>.key_secret from `directory` (role: "client", "worker", "monitor" or "manager")."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")
    root = _existing_directory(directory)
    server_path = os.path.join(root, SCHEDULER_PUBLIC)
    secret_path = os.path.join(root, role + SECRET_SUFFIX)
    server_public = _load(
        server_path,
        _read_public,
        f"copy {SCHEDULER_PUBLIC} from the keys directory scaler_keygen made (every machine needs it), "
        f"or create keys with: scaler_keygen {root}",
    )
    pair = _load(
        secret_path,
        _read_pair,
        f"copy {role}{SECRET_SUFFIX} (or the whole folder made for a named {role}) from the keys directory "
        f"scaler_keygen made, or create keys with: scaler_keygen {root}",
    )
    _warn_if_open(secret_path)
    return PeerKeys(server_public=server_public, pair=pair, role=role, source=secret_path)


def load_server_keys(directory: str | os.PathLike[str]) -> ServerKeys:
    """scheduler.key_secret from `directory`, for the scheduler. Its authorized_* folders are read too, so that what
    the scheduler would refuse at start (a key file another user could change, a folder that cannot be read) is a
    KeysError here."""
    root = _existing_directory(directory)
    path = os.path.join(root, SCHEDULER_SECRET)
    folders = ", ".join(f"{AUTHORIZED[role]}/" for role in ROLES)
    pair = _load(
        path,
        _read_pair,
        f"create keys with: scaler_keygen {root} (or copy {SCHEDULER_SECRET} and the {folders} folders from the "
        "keys directory it made)",
    )
    _warn_if_open(path)
    try:
        read_authorized(root)
    except KeysUnreadable as exc:
        raise KeysError(f"cannot read the authorized keys: {exc}") from None
    return ServerKeys(pair=pair, directory=root)


def read_authorized(directory: str | os.PathLike[str]) -> tuple[dict[bytes, AuthorizedKey], list[str]]:
    """Every key now in DIR/authorized_clients, authorized_workers, authorized_monitors and authorized_managers, keyed
    by public key, and the problems found: a *.key file that is not a key file is skipped (other files are ignored); a
    folder that is not there admits nobody (a directory made before a role existed has no folder for it); a key in two
    folders is admitted as none of them.

    Raises KeysUnreadable when a folder or a key file cannot be read now (the caller keeps the keys it has), and
    KeysError when another user could change the keys directory, a folder or a key file (see _check_private)."""
    root = os.path.abspath(os.fspath(directory))
    problems: list[str] = []
    if checked_keys_directory(root) is None:
        return {}, problems
    holders: dict[bytes, list[AuthorizedKey]] = {}
    for role in ROLES:
        for public, key in _read_folder(os.path.join(root, AUTHORIZED[role]), role, problems).items():
            holders.setdefault(public, []).append(key)
    for _public, keys in sorted(holders.items()):
        if len(keys) > 1:
            problems.append(
                f"{_and(key.path for key in keys)} hold the same public key; a key has one role (client, worker, "
                "monitor or manager), so it is admitted as none of them"
            )
    return {public: keys[0] for public, keys in holders.items() if len(keys) == 1}, problems


def authorized_fingerprint(directory: str | os.PathLike[str]) -> tuple[object, ...]:
    """Changes whenever read_authorized's answer may change: names, sizes, times, inodes, owners and modes of the
    *.key files, their folders, the keys directory and the directories above it (stats only: cheap enough to poll
    every second). Raises KeysUnreadable when one cannot be looked at now: that is not a change."""
    root = os.path.abspath(os.fspath(directory))
    places = tuple(_stat_print(path) for path in (*parents(root), root))
    return (places, *(_folder_fingerprint(os.path.join(root, AUTHORIZED[role])) for role in ROLES))


def _stat_print(path: str) -> tuple[object, ...]:
    try:
        st = os.stat(path)
    except OSError as exc:
        unless_gone(exc, path, "reached")
        return (path, None)
    return (path, st.st_ino, st.st_uid, st.st_mode)


def _folder_fingerprint(folder: str) -> tuple[object, ...]:
    try:
        folder_stat = os.stat(folder)
    except OSError as exc:
        unless_gone(exc, folder, "reached")
        return (folder, None)
    try:
        with os.scandir(folder) as entries:
            names = sorted(entry.name for entry in entries if entry.name.endswith(PUBLIC_SUFFIX))
    except OSError as exc:
        unless_gone(exc, folder, "listed")
        return (folder, None)
    files: list[tuple[object, ...]] = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            st = os.stat(path)
        except OSError as exc:
            unless_gone(exc, path, "reached")
            files.append((name, None))
        else:
            files.append((name, st.st_size, st.st_mtime_ns, st.st_ino, st.st_uid, st.st_mode))
    meta = (folder_stat.st_mtime_ns, folder_stat.st_ino, folder_stat.st_uid, folder_stat.st_mode)
    return (folder, *meta, tuple(files))


def _read_folder(folder: str, role: str, problems: list[str]) -> dict[bytes, AuthorizedKey]:
    folder_stat = checked(folder, f"the folder {folder}")
    if folder_stat is None:
        return {}
    if not stat.S_ISDIR(folder_stat.st_mode):
        problems.append(f"{folder} is not a folder: no {role} is admitted from it")
        return {}
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        unless_gone(exc, folder, "listed")
        return {}
    keys: dict[bytes, AuthorizedKey] = {}
    for file_name in names:
        if not file_name.endswith(PUBLIC_SUFFIX) or file_name.startswith("."):
            continue
        path = os.path.join(folder, file_name)
        try:
            public = _read_public(path)
        except _BadKeyFile as exc:
            problems.append(f"{path} {exc}: skipped")
            continue
        if public in keys:
            problems.append(f"{path} holds the same key as {keys[public].path}: admitted once, as the latter")
            continue
        keys[public] = AuthorizedKey(role=role, name=file_name[: -len(PUBLIC_SUFFIX)], public=public, path=path)
    return keys


def _existing_directory(directory: str | os.PathLike[str]) -> str:
    root = os.path.abspath(os.fspath(directory))
    if not os.path.isdir(root):
        raise KeysError(
            f"the keys directory {root} does not exist: create keys with: scaler_keygen {root}, "
            f"or point --keys (or {ENV_VAR}) at the directory that holds them"
        )
    try:
        checked_keys_directory(root)
    except KeysUnreadable as exc:
        raise KeysError(str(exc)) from None
    return root


def _load(path: str, read: Callable[[str], _T], fix: str) -> _T:
    try:
        return read(path)
    except _BadKeyFile as exc:
        reason = str(exc)
        hint = fix if reason == "is missing" else "make it again with scaler_keygen, or copy it again"
        raise KeysError(f"{path} {reason}: {hint}") from None
    except KeysUnreadable as exc:
        raise KeysError(str(exc)) from None


def _parse(path: str) -> tuple[bytes, bytes | None]:
    """The public and secret key of a key file. _BadKeyFile if it is not there or not a key file, KeysError if
    another user could change it, KeysUnreadable if it cannot be read now."""
    try:
        file_stat = os.stat(path)
    except OSError as exc:
        unless_gone(exc, path, "read")
        raise _BadKeyFile("is not a file" if os.path.islink(path) else "is missing") from None
    if not stat.S_ISREG(file_stat.st_mode):
        raise _BadKeyFile("is not a file")
    check_private(path, file_stat, f"the key file {path}")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except ValueError:
        raise _BadKeyFile("holds no public-key: it is not a key file") from None
    except OSError as exc:
        unless_gone(exc, path, "read")
        raise _BadKeyFile("is missing") from None
    if not _is_z85_key(public):
        raise _BadKeyFile("holds a public-key that is not 40 Z85 characters")
    return public, secret


def _read_public(path: str) -> bytes:
    return _parse(path)[0]


def _read_pair(path: str) -> KeyPair:
    public, secret = _parse(path)
    if secret is None:
        raise _BadKeyFile("holds no secret-key (is it a copy of a public .key file?)")
    if not _is_z85_key(secret) or zmq.curve_public(secret) != public:
        raise _BadKeyFile("holds a secret-key that does not match its public-key")
    return KeyPair(public=public, secret=secret)


def _is_z85_key(value: bytes) -> bool:
    return len(value) == 40 and _Z85.issuperset(value)


def _warn_if_open(path: str) -> None:
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            logger.warning("%s is open to other users (mode %04o): run chmod 600 %s", path, mode, path)


def _and(items: Iterable[str]) -> str:
    listed = list(items)
    return listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]


# ---- writing -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Write:
    """One file generate() will create: its path relative to DIR, its text and its mode."""

    path: str
    text: str
    mode: int


def generate(
    directory: str | os.PathLike[str],
    clients: Sequence[str] = (),
    workers: Sequence[str] = (),
    monitors: Sequence[str] = (),
    managers: Sequence[str] = (),
) -> list[str]:
    """Create what is missing of the key directory layout, plus a named key for each client, worker, monitor and
    manager name given; never overwrite a key (a directory made before a role existed gets that role's files).
    Returns the lines of a report: what was created, which file goes to which machine. KeysError if another user
    could change the directory, its folders or its key files (nothing is written then)."""
    root = os.path.abspath(os.path.expanduser(os.fspath(directory)))
    named = _check_names({"client": clients, "worker": workers, "monitor": monitors, "manager": managers})
    if os.path.lexists(root) and not os.path.isdir(root):
        raise KeysError(f"{root} exists and is not a directory: choose another keys directory")
    checked_keys_directory(root)
    for folder in dict.fromkeys([*AUTHORIZED.values(), *(name for _, name in named)]):
        checked(os.path.join(root, folder), f"the folder {os.path.join(root, folder)}")
    planned = _plan_pair(root, "scheduler", "scheduler", SCHEDULER_SECRET, SCHEDULER_PUBLIC)
    if planned is None:
        raise KeysError(
            f"{root} holds {SCHEDULER_PUBLIC} but not {SCHEDULER_SECRET}: it is a copy for a client, a worker, a "
            "monitor or a manager. "
            f"Run scaler_keygen on the keys directory that holds {SCHEDULER_SECRET}"
        )
    server_public, writes = planned
    notes: list[str] = []
    for role in ROLES:
        writes += _plan_key(root, role, role, role + SECRET_SUFFIX, notes)
    for role, name in named:
        writes += _plan_named(root, role, name, server_public, notes)
    for write in writes:
        _make_folders(root, os.path.dirname(write.path))
        _write_file(os.path.join(root, write.path), write.text, write.mode)
    return _report(root, writes, notes, named)


def _check_names(by_role: dict[str, Sequence[str]]) -> list[tuple[str, str]]:
    roles: dict[str, str] = {}
    for role, names in by_role.items():
        for name in [names] if isinstance(names, str) else names:
            _check_name(name)
            if roles.setdefault(name, role) != role:
                raise KeysError(f"{name!r} is asked for as both a {roles[name]} and a {role}: a name has one role")
    return [(role, name) for name, role in roles.items()]


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise KeysError(
            f"{name!r} is not a valid key name: use 1 to 64 letters, digits, '_', '.' or '-', "
            "starting with a letter or a digit"
        )
    if name.lower() in _RESERVED:
        raise KeysError(f"{name!r} cannot be a key name: the directory's own files use it; choose another name")


def _plan_named(root: str, role: str, name: str, server_public: bytes, notes: list[str]) -> list[_Write]:
    for other in ROLES:
        if other != role and (
            os.path.lexists(os.path.join(root, _authorized_path(other, name)))
            or os.path.lexists(os.path.join(root, name, other + SECRET_SUFFIX))
        ):
            raise KeysError(f"{name!r} is already a {other}'s name in {root}: choose another name for the {role}")
    folder = os.path.join(root, name)
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise KeysError(f"{folder} exists and is not a folder: choose another name for the {role}")
    secret_rel = os.path.join(name, role + SECRET_SUFFIX)
    writes = _plan_key(root, role, name, secret_rel, notes)
    if not os.path.lexists(os.path.join(root, secret_rel)) and not writes:
        return []  # its folder was handed to its machine: leave it be
    server_path = os.path.join(folder, SCHEDULER_PUBLIC)
    if not os.path.lexists(server_path):
        writes.append(_public_file(os.path.join(name, SCHEDULER_PUBLIC), "scheduler", "scheduler", server_public))
    elif _existing(server_path, _read_public) != server_public:
        raise KeysError(
            f"{server_path} is not this directory's {SCHEDULER_PUBLIC}: move it away and run "
            "scaler_keygen again to copy the right one"
        )
    return writes


def _plan_key(root: str, role: str, name: str, secret_rel: str, notes: list[str]) -> list[_Write]:
    """A client's, a worker's, a monitor's or a manager's key pair: its secret in secret_rel, its public key in
    authorized_*/NAME.key."""
    public_rel = _authorized_path(role, name)
    planned = _plan_pair(root, role, name, secret_rel, public_rel)
    if planned is None:
        notes.append(
            f"{os.path.join(root, secret_rel)} is not here but {os.path.join(root, public_rel)} is (was the secret "
            "moved to its machine?): kept as is, no new key made"
        )
        return []
    return planned[1]


def _plan_pair(root: str, role: str, name: str, secret_rel: str, public_rel: str) -> tuple[bytes, list[_Write]] | None:
    """The public key of the pair kept as secret_rel and public_rel, and the writes that complete it; None when only
    the public half is here. The secret is written first: a run cut short leaves a secret to finish from."""
    secret_path, public_path = os.path.join(root, secret_rel), os.path.join(root, public_rel)
    if os.path.lexists(secret_path):
        pair = _existing(secret_path, _read_pair)
        if not os.path.lexists(public_path):
            return pair.public, [_public_file(public_rel, role, name, pair.public)]
        if _existing(public_path, _read_public) != pair.public:
            raise KeysError(
                f"{public_path} does not match {secret_path}: move {public_path} away and run "
                "scaler_keygen again to write it from the secret"
            )
        return pair.public, []
    if os.path.lexists(public_path):
        return None
    pair = _new_pair()
    return pair.public, [_secret_file(secret_rel, role, name, pair), _public_file(public_rel, role, name, pair.public)]


def _existing(path: str, read: Callable[[str], _T]) -> _T:
    try:
        return read(path)
    except _BadKeyFile as exc:
        raise KeysError(f"{path} {exc}: move it away (or restore it), then run scaler_keygen again") from None


def _authorized_path(role: str, name: str) -> str:
    return os.path.join(AUTHORIZED[role], name + PUBLIC_SUFFIX)


def _new_pair() -> KeyPair:
    public, secret = zmq.curve_keypair()
    return KeyPair(public=public, secret=secret)


def _public_file(rel: str, role: str, name: str, public: bytes) -> _Write:
    if role == "scheduler":
        who = "Public: copy it to every machine of the cluster."
    else:
        who = f"Public: the scheduler admits the {role} that holds the matching secret."
    return _Write(rel, _key_text(role, name, who, public, None), _PUBLIC_MODE)


def _secret_file(rel: str, role: str, name: str, pair: KeyPair) -> _Write:
    if role == "scheduler":
        holder = "the scheduler's machine"
    elif name == role:
        holder = _HOLDERS[role]
    else:
        holder = f"{role} {name}'s machine"
    who = f"SECRET: keep it on {holder} only, mode 0600."
    return _Write(rel, _key_text(role, name, who, pair.public, pair.secret), _SECRET_MODE)


def _key_text(role: str, name: str, who: str, public: bytes, secret: bytes | None) -> str:
    lines = [
        f"#   ****  Generated on {datetime.date.today().isoformat()} by scaler_keygen  ****",
        f"#   Scaler CurveZMQ key: {role} {name}. {who}",
        "",
        "metadata",
        f'    name = "{name}"',
        f'    role = "{role}"',
        "curve",
        f'    public-key = "{public.decode("ascii")}"',
    ]
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return "\n".join(lines) + "\n"


def _make_folders(root: str, rel: str) -> None:
    os.makedirs(root, mode=_SECRET_FOLDER_MODE, exist_ok=True)
    if rel:
        mode = _PUBLIC_FOLDER_MODE if rel in AUTHORIZED.values() else _SECRET_FOLDER_MODE
        os.makedirs(os.path.join(root, rel), mode=mode, exist_ok=True)


def _write_file(path: str, text: str, mode: int) -> None:
    """Write `path` whole or not at all, with `mode` from the first byte on (a temporary file, then a rename)."""
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii", newline="\n") as file:
            if hasattr(os, "fchmod"):
                os.fchmod(file.fileno(), mode)  # the umask may have taken read bits from a public file
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


# ---- the report ----------------------------------------------------------------------------------------------------


def _report(root: str, writes: list[_Write], notes: list[str], named: list[tuple[str, str]]) -> list[str]:
    def at(*parts: str) -> str:
        return os.path.join(root, *parts)

    if writes:
        lines = [f"Created in {root}: " + ", ".join(write.path for write in writes)]
    else:
        lines = [f"Nothing to create in {root}: every key asked for is there already (kept as is)."]
    lines += notes
    rows = [
        ("the scheduler's machine:", ", ".join([at(SCHEDULER_SECRET), *(at(AUTHORIZED[role], "") for role in ROLES)]))
    ]
    for role in ("worker", "client", "monitor", "manager"):
        if os.path.lexists(at(role + SECRET_SUFFIX)):
            why = _WHY[role].format(worker=at("worker" + SECRET_SUFFIX))
            rows.append((f"every {role} machine:", f"{at(SCHEDULER_PUBLIC)}, {at(role + SECRET_SUFFIX)}{why}"))
    for role, name in named:
        if os.path.lexists(at(name, role + SECRET_SUFFIX)):
            why = ", with a worker.key_secret added for the workers it starts" if role == "manager" else ""
            rows.append((f"{role} {name}'s machine:", f"the folder {at(name)} (use it as its keys directory{why})"))
    width = max(len(label) for label, _ in rows)
    lines.append("Which file goes where:")
    lines += [f"  {label:<{width}}  {place}" for label, place in rows]
    lines.append(
        f'To try keys out on one machine, pass --keys {root} (or keys="{root}", or set {ENV_VAR}={root}) to every '
        'program; tasks can then read every secret here: for real use, see docs/security.md, "On one machine".'
    )
    lines.append("Secret files (*.key_secret) must never leave the machines listed; keep them mode 0600.")
    return lines
