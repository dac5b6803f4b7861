"""The package's imports, read from its source: no circles, and no arrow from a lower floor up.

The floors are written down once, here, lowest first, each a set of the package's folders (and the few modules at
its root): a module may import from its own floor and the floors below it, never above. Every import counts, also
those inside functions and under ``TYPE_CHECKING``: an import put off to run time still ties the two modules
together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# eventhubs_spark's floors, lowest first: each entry is a top-level module or subpackage of the package
FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors", "defaults", "positions", "common", "local_spark"),  # plain data and pure helpers: no I/O of ours
    ("auth",),  # where a hub is, how to sign in and reach it: settings as plain data, and the sign-in they describe
    ("amqp",),  # the SDK seam, the receiving connections, the frame reader, what a failure means
    ("codec", "avro", "capture", "json_bodies", "registry"),  # messages into Arrow and back; Avro, JSON, the registry
    ("interprocess",),  # what crosses between a query's processes: task ranges, sealed sockets, the driver's channel
    ("executor",),  # what lives per executor: receivers, their pool, the receiver service and its client, producers
    ("process",),  # what one Spark process keeps across tasks, driver or executor: the runtime
    ("planning", "lag", "checkpoints", "options"),  # the driver's planning, the checkpoint store, the options
    ("source", "sink", "cli", "__init__"),  # what Spark and users call
)
EMULATOR_FLOORS: tuple[tuple[str, ...], ...] = (
    ("amqp", "config", "tls", "websocket", "entra", "metering", "registry", "capture"),
    ("broker",),
    ("connection",),
    ("server",),
    ("emulator",),
    ("__init__", "__main__", "pytest_plugin"),
)


def module_graph(package_dir: Path) -> dict[str, set[str]]:
    """Each module of the package (dotted, relative to it; the package itself is ``__init__``) and the
    package's modules it imports."""
    package = package_dir.name
    names = {}
    for path in package_dir.rglob("*.py"):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        names[path] = ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)
    modules = set(names.values())

    def resolve(dotted: str) -> str | None:
        """The package's module ``dotted`` (absolute) names, or None when it is not one."""
        if dotted == package:
            return "__init__"
        if not dotted.startswith(package + "."):
            return None
        inner = dotted[len(package) + 1 :]
        return inner if inner in modules else None

    graph: dict[str, set[str]] = {}
    for path, name in names.items():
        is_package = path.name == "__init__.py"
        here = [package, *name.split(".")] if name != "__init__" else [package]
        if not is_package:
            here = here[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found = resolve(alias.name)
                    if found:
                        deps.add(found)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here[: len(here) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                module = resolve(base)
                for alias in node.names:  # `from pkg import submodule` imports the submodule
                    found = resolve(f"{base}.{alias.name}")
                    if found:
                        deps.add(found)
                    elif module:
                        deps.add(module)
        deps.discard(name)
        graph[name] = deps
    return graph


def floor_of(module: str, floors: tuple[tuple[str, ...], ...]) -> int:
    top = module.split(".")[0]
    for i, floor in enumerate(floors):
        if top in floor:
            return i
    raise AssertionError(f"{module} is on no floor: add it to the floors in {Path(__file__).name}")


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward(graph: dict[str, set[str]], floors: tuple[tuple[str, ...], ...]) -> list[str]:
    return sorted(
        f"{m} (floor {floor_of(m, floors)}) imports {d} (floor {floor_of(d, floors)})"
        for m, deps in graph.items()
        for d in deps
        if floor_of(d, floors) > floor_of(m, floors)
    )


PACKAGES = [("eventhubs_spark", FLOORS), ("eventhubs_emulator", EMULATOR_FLOORS)]


@pytest.mark.parametrize(("package", "floors"), PACKAGES)
def test_every_module_is_on_a_floor(package, floors):
    for module in module_graph(ROOT / package):
        floor_of(module, floors)


@pytest.mark.parametrize(("package", "floors"), PACKAGES)
def test_no_import_circles(package, floors):
    assert circles(module_graph(ROOT / package)) == []


@pytest.mark.parametrize(("package", "floors"), PACKAGES)
def test_no_import_from_a_lower_floor_to_a_higher_one(package, floors):
    assert upward(module_graph(ROOT / package), floors) == []


def test_the_reading_sees_every_kind_of_import_and_catches_a_circle_and_an_arrow_up(tmp_path):
    """The checks themselves can fail: a package with a circle made of a lazy import, a relative
    ``from . import module`` and an import under TYPE_CHECKING, and an arrow from a lower floor up."""
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from ..high import b\n")
    (pkg / "high.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .low import c\n")
    (pkg / "low" / "c.py").write_text("from . import a\n")
    graph = module_graph(pkg)
    assert graph["low.a"] == {"high"} and graph["high"] == {"low.c"} and graph["low.c"] == {"low.a"}
    assert circles(graph) == [["high", "low.a", "low.c"]]
    floors = (("low",), ("high", "__init__"))
    assert upward(graph, floors) == ["low.a (floor 0) imports high (floor 1)"]
    (pkg / "low" / "a.py").write_text("X = 1\n")
    assert circles(module_graph(pkg)) == [] and upward(module_graph(pkg), floors) == []
