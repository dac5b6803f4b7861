"""The architecture page's map, sequence and "where to add" guide name only files that exist, and the map names
every module of the package: the page is the newcomer's way in, so it must match the code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "pages" / "architecture.md"
PACKAGE = ROOT / "eventhubs_spark"


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _rows(map_text: str) -> list[tuple[list[str], list[str]]]:
    """Each row of the map: the folders its first cell names, and every file or folder named in the row."""
    rows = []
    for line in map_text.splitlines():
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        folders = [t.rstrip("/") for t in re.findall(r"`([\w/]+/)`", first)]
        rows.append((folders, re.findall(r"`([\w/.]+(?:\.py|/))`", line)))
    return rows


def _exists(token: str, folders: list[str]) -> bool:
    token = token.rstrip("/")
    bases = [ROOT, PACKAGE, ROOT / "eventhubs_emulator", *(PACKAGE / f for f in folders)]
    return any((base / token).exists() for base in bases)


def test_every_file_the_page_names_exists():
    text = PAGE.read_text()
    missing = []
    for folders, tokens in _rows(_section(text, "The map")):
        missing += [t for t in tokens if not _exists(t, folders)]
    for title in ("One micro-batch, file by file", "Where to add", "Words of this project",
                  "The emulator, the tests and the benchmarks"):  # fmt: skip
        for token in re.findall(r"`([\w/.]+\.py)`", _section(text, title)):
            if not _exists(token, []):
                missing.append(token)
    assert not missing, f"the architecture page names files that do not exist: {missing}"


def test_the_map_names_every_module_of_the_package():
    named: set[Path] = set()
    for folders, tokens in _rows(_section(PAGE.read_text(), "The map")):
        for token in tokens:
            for base in (PACKAGE, *(PACKAGE / f for f in folders)):
                if (base / token).is_file():
                    named.add((base / token).resolve())
    modules = {
        p.resolve()
        for p in PACKAGE.rglob("*.py")
        if not (p.name == "__init__.py" and p.parent != PACKAGE) and p.name != "__main__.py"
    }
    unnamed = sorted(str(p.relative_to(PACKAGE)) for p in modules - named)
    assert not unnamed, f"modules the architecture page's map does not name: {unnamed}"
