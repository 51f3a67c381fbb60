"""The package's import graph read from its source (``ast``), and the cycles in it.

Read from the source, not the running program: every ``import`` and ``from`` statement
counts wherever it stands (under ``if TYPE_CHECKING:``, inside a function), since each is
a dependency a reader follows and a cycle the type checker walks. The package is taken
from wherever ``spark_zmq`` is imported, so ``PYTHONPATH`` at another tree checks that tree.
"""

from __future__ import annotations

import ast
import pathlib

import spark_zmq

ROOT = pathlib.Path(spark_zmq.__file__).parent


def module_name(path: pathlib.Path) -> str:
    """``spark_zmq.patterns.wires.zmtp.stream`` for ``.../spark_zmq/patterns/wires/zmtp/stream.py``
    (a package's ``__init__.py`` is the package)."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def from_target(package: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` in ``package`` reads from
    (``from ...heartbeat import x`` in ``spark_zmq.patterns.wires.zmtp``: ``spark_zmq.patterns.heartbeat``)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(under: str = "spark_zmq") -> dict[str, set[str]]:
    """module -> the modules of ``under`` (a package, with its subpackages) it imports."""
    directory = ROOT.parent.joinpath(*under.split("."))
    modules = {module_name(path): path for path in sorted(directory.rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                target = from_target(package, node)
                # ``from . import x`` names the module x; ``from .codec import y`` a name
                # in codec (importing a submodule loads its parent packages first: that
                # is not a dependency on what they define)
                targets = [
                    f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target for alias in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules of each strongly connected group of more than one (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def describe(graph: dict[str, set[str]], groups: list[list[str]]) -> str:
    """Each cycle's modules and what each imports of the others, for an assertion message."""
    return "\n  ".join("\n  ".join(f"{m} imports {sorted(graph[m] & set(group))}" for m in group) for group in groups)
