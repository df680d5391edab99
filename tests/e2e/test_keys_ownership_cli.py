"""The command-line programs given a keys directory another user could change: a usage error (status 2) that names
the path, its owner and mode, and the fix; nothing starts, nothing is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scaler.security.keys import generate
from tests.e2e.test_cli import cli, run

NOBODY = 65534


def usage_error(program: str, *args: str) -> str:
    done = run(cli(program), *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{program}: error:" in done.stderr and "Traceback" not in done.stderr, done.stderr
    return " ".join(done.stderr.split())  # argparse wraps lines at the terminal's width


@pytest.mark.parametrize("program", ["scaler_scheduler", "scaler_cluster"])
def test_a_keys_directory_writable_by_others_is_a_usage_error(program: str, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    generate(keys)
    os.chmod(keys, 0o777)
    text = usage_error(program, "--keys", str(keys), "tcp://127.0.0.1:8516")
    assert f"the keys directory {keys} is writable by its group and others" in text, text
    assert "mode 0777" in text and f"chmod go-w {keys}" in text and "scaler_keygen" in text, text


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a file to another user takes root")
def test_a_keys_directory_of_another_user_is_a_usage_error(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    generate(keys)
    os.chown(keys, NOBODY, -1)
    text = usage_error("scaler_scheduler", "--keys", str(keys), "tcp://127.0.0.1:8516")
    assert f"the keys directory {keys} belongs to nobody (uid {NOBODY})" in text, text
    assert f"chown root {keys}" in text, text


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a file to another user takes root")
def test_a_scheduler_with_another_users_key_in_its_authorized_folder_does_not_start(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    generate(keys)
    dropped = keys / "authorized_clients" / "dropped.key"
    dropped.write_bytes((keys / "authorized_clients" / "client.key").read_bytes())
    os.chown(dropped, NOBODY, -1)
    text = usage_error("scaler_scheduler", "--keys", str(keys), "tcp://127.0.0.1:8516")
    assert f"the key file {dropped} belongs to nobody (uid {NOBODY})" in text, text


def test_scaler_keygen_refuses_a_directory_writable_by_others(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    text = usage_error("scaler_keygen", str(shared / "keys"))
    assert f"the directory {shared} above the keys directory {shared / 'keys'} is writable" in text, text
    assert f"chmod go-w {shared}" in text, text
    assert not (shared / "keys").exists()
