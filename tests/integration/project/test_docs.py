"""The documentation's first pipeline runs as written (issue 49), installed as a user installs it: the Getting
started page's wheel commands build the package's wheel and install it into a clean virtual environment (its
dependencies from the package index, nothing from this checkout), then the page's commands and script, taken
from the page itself, run there against the emulator, twice: the second run reads on from the first's
checkpoint. Its Spark runs in processes of its own: not marked spark, so it runs beside the Spark tests."""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "pages" / "getting-started.md"


def _first_errors(stderr: str) -> str:
    """The first lines of a failed run's log that name an error or exception, and a few after each: a deep JVM stack
    trace pushes where it began out of the log's tail (a 2026-12-07 CI run ended with "Java heap space" and 3,000
    characters of analyzer frames, nothing of what ran out)."""
    lines = stderr.splitlines()
    picked: list[str] = []
    for i, line in enumerate(lines):
        named = "Error" in line or "ERROR" in line or "Exception" in line
        if named and not line.startswith(("\tat ", "        at ")):
            picked.extend(lines[i : i + 4])
        if len(picked) >= 24:
            break
    return "\n".join(picked)[:3000]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def _argv(command: str, venv: Path, cwd: Path) -> list[str]:
    """A command of the page as run here: its .venv is ``venv``, its ``.`` the checkout, globs expanded."""
    argv = []
    for word in shlex.split(command):
        word = word.replace(".venv/", f"{venv}/")
        word = str(ROOT) if word == "." else word
        argv += sorted(glob.glob(str(cwd / word))) or [word] if "*" in word else [word]
    return argv


def test_the_getting_started_pipeline_runs_as_written_from_a_wheel(eventhub, tmp_path):
    text = PAGE.read_text()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    wheel_block = next(b for b in _blocks(text, "bash") if "pip wheel" in b)
    for command in wheel_block.splitlines():
        command = command.split("#")[0].strip()
        if command:
            done = subprocess.run(_argv(command, venv, tmp_path), cwd=tmp_path, capture_output=True, text=True,
                                  timeout=600)  # fmt: skip
            assert done.returncode == 0, f"{command}: {done.stderr[-3000:]}"
    where = "import eventhubs_spark; print(eventhubs_spark.__file__)"
    shown = subprocess.run([str(venv / "bin" / "python"), "-c", where], cwd=tmp_path, capture_output=True, text=True,
                           check=True).stdout  # fmt: skip
    assert str(venv) in shown and str(ROOT) not in shown, f"installed from the wheel, not the checkout: {shown}"
    script = next(b for b in _blocks(text, "python") if b.startswith("# first_pipeline.py"))
    commands = [line.split("  #")[0].strip() for block in _blocks(text, "bash") for line in block.splitlines()]
    sends = [c for c in commands if " send " in c]
    runs = [c for c in commands if c.endswith("first_pipeline.py")]
    expected = [int(n) for n in re.findall(r"It prints `events in the table: (\d+)`", text)]
    assert len(sends) == 2 and len(runs) == 2 and len(expected) == 2, (sends, runs, expected)
    (tmp_path / "first_pipeline.py").write_text(script)
    bin_dir = venv / "bin"  # the page's .venv/bin
    env = {**os.environ, "EVENTHUBS_CONNECTION_STRING": eventhub.connection_string}
    env.pop("PYTHONPATH", None)
    env.pop("PYSPARK_PYTHON", None)  # what a user's shell has: the script's import points the workers
    env.pop("PYSPARK_DRIVER_PYTHON", None)

    def run(command: str) -> str:
        argv = shlex.split(command)
        argv[0] = str(bin_dir / Path(argv[0]).name)
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{command}: {_first_errors(done.stderr)}\n...\n{done.stderr[-3000:]}"
        return done.stdout

    for send, script_run, count in zip(sends, runs, expected, strict=True):
        run(send)
        out = run(script_run)
        assert f"events in the table: {count}" in out, out[-2000:]
    bodies = subprocess.run(
        [str(bin_dir / "python"), "-c", "import pyarrow.parquet as pq, sys; t = pq.read_table(sys.argv[1]); "
         "print(t.num_rows, len(set(zip(t['partition'].to_pylist(), t['sequenceNumber'].to_pylist()))))",
         str(tmp_path / "out" / "events")],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert bodies == [str(expected[-1])] * 2, "every event once: no event read twice by the second run"


def test_the_built_site_works_from_disk_every_link_a_file_and_search_offline(tmp_path):
    """`./dev docs` says "open build/site/index.html": from file:// a link to a folder opens a listing and the
    search needs a server unless the site is built for it. Every page's internal link names a file that exists,
    and the search index is the offline one (a script, no fetch)."""
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "docs" / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    pages = sorted(p for p in site.glob("*.html") if p.name != "404.html")  # a server's page: absolute links
    assert len(pages) > 10
    for page in pages:
        for link in re.findall(r'href="([^"#:]+)(?:#[^"]*)?"', page.read_text()):
            target = (page.parent / link).resolve()
            assert target.is_file(), f"{page.name} links to {link}, which is not a file"
    assert (site / "search" / "search_index.js").is_file(), "the offline search index"
