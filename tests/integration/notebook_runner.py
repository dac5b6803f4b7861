"""Runs a Databricks notebook in source format on local Spark, as a user would after importing it.

A notebook is a ``.py`` file that starts with ``# Databricks notebook source``; cells are separated by
``# COMMAND ----------`` and Markdown cells are ``# MAGIC`` lines. The runner executes the code cells in
order in one namespace that has what Databricks provides: ``spark``, ``dbutils`` (``widgets`` and
``secrets``) and ``display``, which keeps what it was shown so a test can look at it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = "# Databricks notebook source"
SEPARATOR = "# COMMAND ----------"


def cells(path: Path) -> list[str]:
    text = path.read_text()
    if not text.startswith(HEADER):
        raise ValueError(f"{path} is not a Databricks notebook in source format (first line {HEADER!r})")
    out = []
    for cell in text[len(HEADER) :].split(SEPARATOR):
        lines = [line for line in cell.strip("\n").splitlines() if line.strip()]
        if lines and not all(line.startswith("# MAGIC") for line in lines):
            out.append(cell)
    return out


class Widgets:
    def __init__(self, values: dict[str, str]) -> None:
        self._values = dict(values)

    def text(self, name: str, default: str, label: str | None = None) -> None:
        self._values.setdefault(name, default)

    def get(self, name: str) -> str:
        if name not in self._values:
            raise KeyError(f"no widget {name!r}: define it with dbutils.widgets.text first")
        return self._values[name]


class Secrets:
    def __init__(self, values: dict[tuple[str, str], str]) -> None:
        self._values = values

    def get(self, scope: str, key: str) -> str:
        try:
            return self._values[(scope, key)]
        except KeyError:
            raise KeyError(f"secret {key!r} not in scope {scope!r}") from None


@dataclass
class DBUtils:
    widgets: Widgets
    secrets: Secrets


@dataclass
class Run:
    namespace: dict[str, Any]
    displayed: list[Any] = field(default_factory=list)

    def tables(self) -> list[list[Any]]:
        return [d for d in self.displayed if isinstance(d, list)]

    def figures(self) -> list[Any]:
        return [d for d in self.displayed if not isinstance(d, list)]


def run_notebook(path: Path, spark: Any, secrets: dict[tuple[str, str], str], widgets: dict[str, str]) -> Run:
    import matplotlib

    matplotlib.use("Agg")
    run = Run(namespace={})

    def display(obj: Any) -> None:
        if hasattr(obj, "collect") and hasattr(obj, "schema"):
            run.displayed.append(obj.limit(1000).collect())
        else:
            run.displayed.append(obj)

    run.namespace.update(
        {"__name__": "__main__", "spark": spark, "dbutils": DBUtils(Widgets(widgets), Secrets(secrets)),
         "display": display}
    )  # fmt: skip
    for number, cell in enumerate(cells(path), start=1):
        code = compile(cell, f"{path.name} (cell {number})", "exec")
        exec(code, run.namespace)
    return run
