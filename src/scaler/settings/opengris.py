"""opengris-scaler 2.x command lines and config files (issue 29): what its users paste, taken where it means something
here and refused, naming the replacement, where it does not.

Command lines (translate_argv, before argparse reads them):
- scaler_cluster `--per-worker-capabilities/-pwc "gpu,linux"`: each comma-separated capability becomes a
  `--capability`;
- scaler_scheduler `--allocate-policy/-ap even|capability`: taken and ignored (one placement policy here, capabilities
  always honoured); `--object-storage-address/-osa ADDRESS`: taken and ignored (objects live in the scheduler);
  `--adapter-webhook-url`: refused, naming scaler_worker_manager;
- scaler_cluster `--task-timeout-seconds`: taken and ignored (a task's timeout is the client's here:
  client.options(timeout=...)), as scaler 1.9.9's task_timeout_seconds keyword is;
- scaler_ui `--web-port N`: `--port N`.
Config files (translate_document, before the tables are read): the tables `[webui]` (as `[ui]`) and
`[object_storage_server]` (dropped), the worker adapters' tables refused; in the tables, the keys of the flags above,
and `scheduler_address` as `address`.

Each note of what was taken and ignored is printed once on stderr. Runs on Python 3.9 (the scheduler on PyPy).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

ALLOCATE_POLICIES = ("even", "capability")
_IGNORED_ALLOCATE = (
    "{flag} {value}: Scaler has one placement policy, which always honours capabilities; the option is ignored"
)
_IGNORED_STORAGE = (
    "{flag} {value}: Scaler keeps objects in the scheduler, with no object storage server; the option is ignored"
)
_REFUSED = {
    "--adapter-webhook-url": (
        "--adapter-webhook-url: Scaler grows and shrinks workers through scaler_worker_manager (native, slurm, "
        "kubernetes), which connects to the scheduler itself: start one instead (docs/deploying/autoscaling.md)"
    ),
}
_REFUSED_FLAGS = frozenset({("scheduler", "--adapter-webhook-url")})
_IGNORED_TIMEOUT = (
    "{flag} {value}: a task's timeout is the client's here (client.options(timeout=SECONDS) or "
    "Client(..., task_timeout=SECONDS)); the workers do not stop tasks on their own: the option is ignored"
)
_WORKER_ADAPTER_TABLES = ("native_worker_adapter", "symphony_worker_adapter", "worker_adapter")


class Refused(ValueError):
    """A 2.x option that has no meaning here: the message names the replacement."""


def translate_argv(argv: Sequence[str], command: str) -> list[str]:
    """`argv` with opengris-scaler 2.x's options of `command` (scheduler, cluster, ui) turned into this version's, or
    Refused naming the replacement."""
    out: list[str] = []
    words = list(argv)
    index = 0
    while index < len(words):
        word = words[index]
        flag, _, attached = word.partition("=") if word.startswith("--") else (word, "", "")
        value = attached if attached else (words[index + 1] if index + 1 < len(words) else "")
        step = 1 if attached else 2
        if command == "cluster" and flag in ("--per-worker-capabilities", "-pwc"):
            for capability in _split(value):
                out += ["--capability", capability]
        elif command == "scheduler" and flag in ("--allocate-policy", "-ap"):
            if value not in ALLOCATE_POLICIES:
                raise Refused(
                    f"{flag} {value!r}: Scaler has one placement policy (it honours capabilities): leave it out"
                )
            note(_IGNORED_ALLOCATE.format(flag=flag, value=value))
        elif command == "scheduler" and flag in ("--object-storage-address", "-osa"):
            note(_IGNORED_STORAGE.format(flag=flag, value=value))
        elif command == "cluster" and flag == "--task-timeout-seconds":
            note(_IGNORED_TIMEOUT.format(flag=flag, value=value))
        elif command == "ui" and flag == "--web-port":
            out += ["--port", value]
        elif (command, flag) in _REFUSED_FLAGS:
            raise Refused(_REFUSED[flag])
        else:
            out.append(word)
            step = 1
        index += step
    return out


def translate_document(document: dict[str, Any], path: str) -> dict[str, Any]:
    """A parsed config file with opengris-scaler 2.x's tables and keys turned into this version's (see the module's
    text), or Refused naming the replacement."""
    if not any(name in document for name in ("scheduler", "cluster", "webui", "object_storage_server")):
        return document  # (one command's settings at the top level: its keys are translated by translate_table)
    out = dict(document)
    if out.pop("object_storage_server", None) is not None:
        note(f"{path}: [object_storage_server]: Scaler keeps objects in the scheduler; the table is ignored")
    if "webui" in out:
        if "ui" in out:
            raise Refused(f"{path} has both [webui] (opengris-scaler 2.x's name) and [ui]: keep [ui]")
        out["ui"] = out.pop("webui")
    for name in _WORKER_ADAPTER_TABLES:
        if name in out:
            raise Refused(f"{path}: [{name}]: {_REFUSED['--adapter-webhook-url'].split(': ', 1)[1]}")
    for name in ("scheduler", "cluster", "ui"):
        if isinstance(out.get(name), dict):
            out[name] = translate_table(out[name], name, f"{path}: [{name}]")
    return out


def translate_table(table: dict[str, Any], command: str, where: str) -> dict[str, Any]:
    """One command's settings from a config file, 2.x keys turned into this version's (or Refused)."""
    out = dict(table)
    if "scheduler_address" in out and command in ("scheduler", "cluster"):
        if "address" in out:
            raise Refused(f"{where} has both scheduler_address (opengris-scaler 2.x's name) and address: keep address")
        out["address"] = out.pop("scheduler_address")
    if command == "scheduler":
        if "allocate_policy" in out:
            value = out.pop("allocate_policy")
            if value not in ALLOCATE_POLICIES:
                raise Refused(f"{where} allocate_policy = {value!r}: Scaler has one placement policy; leave it out")
            note(_IGNORED_ALLOCATE.format(flag=f"{where} allocate_policy", value=repr(value)))
        if "object_storage_address" in out:
            value = out.pop("object_storage_address")
            note(_IGNORED_STORAGE.format(flag=f"{where} object_storage_address", value=repr(value)))
        if "adapter_webhook_url" in out:
            raise Refused(f"{where} adapter_webhook_url: {_REFUSED['--adapter-webhook-url'].split(': ', 1)[1]}")
    elif command == "cluster":
        if "per_worker_capabilities" in out:
            value = out.pop("per_worker_capabilities")
            given = _split(value) if isinstance(value, str) else list(value)
            out["capability"] = [*out.get("capability", []), *given]
        if "task_timeout_seconds" in out:
            value = out.pop("task_timeout_seconds")
            note(_IGNORED_TIMEOUT.format(flag=f"{where} task_timeout_seconds", value=repr(value)))
    elif command == "ui" and "web_port" in out:
        out["port"] = out.pop("web_port")
    return out


def translated(parser: argparse.ArgumentParser, argv: Sequence[str], command: str) -> list[str]:
    """translate_argv for an entry point: a usage error (exit code 2) naming the replacement when it refuses."""
    try:
        return translate_argv(argv, command)
    except Refused as exc:
        parser.error(str(exc))


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


_noted: set[str] = set()


def note(text: str) -> None:
    """Say once on stderr what was taken and ignored (before logging starts)."""
    if text not in _noted:
        _noted.add(text)
        print(f"note: {text}", file=sys.stderr)
