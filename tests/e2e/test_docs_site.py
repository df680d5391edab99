"""The documentation site (mkdocs.yml, scripts/docs): it builds strict from the repository, holds the pages a reader
looks for and an API reference entry for every public name of the package, and a broken link, anchor or link to a
file that is not in the repository fails the build."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import scaler

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


def build(config_dir: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=config_dir,
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = build(ROOT, out)
    assert run.returncode == 0, run.stderr[-4000:]
    return out


def test_the_site_has_the_pages_a_reader_looks_for(site: Path) -> None:
    for page in (
        "index.html",
        "getting-started/index.html",
        "client/index.html",
        "deploying/index.html",
        "deploying/autoscaling/index.html",
        "deploying/slurm/index.html",
        "deploying/kubernetes/index.html",
        "deploying/config/index.html",
        "deploying/restarts/index.html",
        "conformance/index.html",
        "integrations/index.html",
        "monitoring/index.html",
        "reliability/index.html",
        "protocol/index.html",
        "benchmarks/index.html",
        "reference/index.html",
        "architecture/index.html",
        "adr/index.html",
        "changelog/index.html",
        "search/search_index.json",
    ):
        assert (site / page).is_file(), page
    changelog = (site / "changelog/index.html").read_text()
    assert "Keep a Changelog" in changelog  # CHANGELOG.md itself, not the page that points to it


def test_every_public_name_has_an_api_entry(site: Path) -> None:
    reference = "".join(page.read_text() for page in (site / "reference").rglob("index.html"))
    ids = set(re.findall(r'id="(scaler\.[\w.]+)"', reference))
    assert "scaler.Client.submit" in ids
    for name in scaler.__all__:
        if name.startswith("__"):
            continue
        assert f"scaler.{name}" in ids or f"scaler.errors.{name}" in ids, name
    for method in ("submit", "map", "get", "send_object", "options", "disconnect", "shutdown"):
        assert f"scaler.Client.{method}" in ids, method


def test_the_modules_imported_beside_scaler_have_api_entries(site: Path) -> None:
    """scaler.joblib, scaler.compat.ray (and its exceptions), scaler.integrations.dask and the part of
    scaler.task_context a task asks: every name they export for programs has an entry, under the module it lives in."""
    import scaler.compat.ray
    import scaler.integrations.ray_exceptions
    import scaler.joblib

    page = (site / "reference" / "integrations" / "index.html").read_text()
    ids = set(re.findall(r'id="(scaler\.[\w.]+)"', page))
    expected = [
        *(f"scaler.integrations.joblib.{name}" for name in scaler.joblib.__all__),
        *(
            f"scaler.integrations.ray.{name}"
            for name in scaler.compat.ray.__all__
            if name not in ("ObjectRef", "exceptions")
        ),
        "scaler.integrations.ray_refs.ObjectRef",
        *(f"scaler.integrations.ray_exceptions.{name}" for name in scaler.integrations.ray_exceptions.__all__),
        "scaler.integrations.dask.get",
        "scaler.task_context.in_task",
        "scaler.task_context.current_task_id",
    ]
    assert [name for name in expected if name not in ids] == []
    assert "scaler.integrations.ray_exceptions.task_error" not in ids  # (not exported: not documented as if it were)


def test_a_broken_link_anchor_or_repository_link_fails_the_build(tmp_path: Path) -> None:
    """The same sources with three bad links added to a page: the strict build fails, naming each."""
    for name in ("mkdocs.yml", "CHANGELOG.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    (tmp_path / "src").symlink_to(ROOT / "src")
    page = tmp_path / "docs" / "getting-started.md"
    page.write_text(
        page.read_text() + "\n[a](no-such-page.md) [b](client.md#no-such-anchor) [c](../src/scaler/no_such_module.py)\n"
    )
    run = build(tmp_path, tmp_path / "site")
    assert run.returncode != 0
    for bad in ("no-such-page.md", "no-such-anchor", "no_such_module.py"):
        assert bad in run.stderr, (bad, run.stderr[-3000:])


def test_every_decision_record_is_listed() -> None:
    index = (ROOT / "docs" / "adr" / "index.md").read_text()
    for record in sorted((ROOT / "docs" / "adr").glob("0*.md")):
        title = record.read_text().splitlines()[0].lstrip("# ").strip()
        assert f"[{title}]({record.name})" in index, f"docs/adr/index.md does not list {record.name} by its title"
