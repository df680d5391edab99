"""mkdocs hooks for the documentation site (mkdocs.yml `hooks:`).

The Markdown files link to the repository as it is on disk (`../src/scaler/protocol/scaler.capnp`,
`../benchmarks/results/diary.md`), which works where they are read as files (GitHub, an editor). In the site those
targets are not pages: each such link becomes a link to the file in the repository (`repo_url`/blob/main/...), once
the file is found on disk. A link to a file that does not exist is a warning, which fails the strict build. The
changelog page shows CHANGELOG.md, whose links are relative to the repository root: they are read from there.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.plugins.scaler")

ROOT = Path(__file__).resolve().parents[1]
DOCS = "docs"
# [text](target) and [text]: target, outside code spans; a target has no spaces
_LINK = re.compile(r"(\]\()([^)\s]+)(\))|(^\[[^\]]+\]:\s*)(\S+)", re.M)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_FROM_ROOT = {"changelog.md": "CHANGELOG.md"}  # pages that show a file of the repository root, as it is


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    source = page.file.src_uri
    base = posixpath.dirname(posixpath.join(DOCS, source))
    if source in _FROM_ROOT:
        markdown, base = (ROOT / _FROM_ROOT[source]).read_text(encoding="utf-8"), ""
    repo = str(config["repo_url"]).rstrip("/")
    pieces = []
    position = 0
    for fence in _FENCE.finditer(markdown):  # links inside code blocks are text
        pieces.append(_rewrite(markdown[position : fence.start()], base, source, repo))
        pieces.append(fence.group(0))
        position = fence.end()
    pieces.append(_rewrite(markdown[position:], base, source, repo))
    return "".join(pieces)


def _rewrite(text: str, base: str, source: str, repo: str) -> str:
    def replace(match: re.Match[str]) -> str:
        head, target, tail = (
            (match.group(1), match.group(2), match.group(3))
            if match.group(1)
            else (
                match.group(4),
                match.group(5),
                "",
            )
        )
        new = _target(target, base, source, repo)
        return f"{head}{new}{tail}"

    return _LINK.sub(replace, text)


def _target(target: str, base: str, source: str, repo: str) -> str:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return target  # a URL, an anchor on this page, an absolute path: mkdocs checks what it can
    path, _, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(base, path))
    if resolved == DOCS or resolved.startswith(DOCS + "/"):
        if not base.startswith(DOCS):  # (a page of the repository root: make the link relative to docs/)
            inside = posixpath.relpath(resolved, posixpath.dirname(posixpath.join(DOCS, source)))
            return inside + (f"#{anchor}" if anchor else "")
        return target  # a page of the site: mkdocs checks it, and its anchor
    on_disk = ROOT / resolved
    if resolved.startswith("..") or not on_disk.exists():
        log.warning("%s links to %r, which is not in the repository (%s)", source, target, resolved)
        return target
    kind = "tree" if on_disk.is_dir() else "blob"
    return f"{repo}/{kind}/main/{resolved}" + (f"#{anchor}" if anchor else "")
