"""The engine's shape (``spark_zmq.patterns.zmtp``): its modules import one way, and a
connection's protocol object reaches the socket only through ``owner.ConnectionOwner``.

Both read the source (``ast``), not the running program, and take the package from
wherever ``spark_zmq`` is imported: run with ``PYTHONPATH`` at another tree to check that
tree.
"""

from __future__ import annotations

import ast
import pathlib
import re

import spark_zmq.patterns.zmtp as zmtp

PACKAGE_DIR = pathlib.Path(zmtp.__file__).parent
PACKAGE = "spark_zmq.patterns.zmtp"


def _module_of(path: pathlib.Path) -> str:
    return PACKAGE if path.name == "__init__.py" else f"{PACKAGE}.{path.stem}"


def _import_graph() -> dict[str, set[str]]:
    """module -> the modules of the package it imports: every ``import`` and ``from``
    statement, wherever it stands (under ``if TYPE_CHECKING:``, inside a function)."""
    modules = {_module_of(path): path for path in sorted(PACKAGE_DIR.glob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = PACKAGE if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # ``from . import x`` (and ``from .codec import y``) may name a module
                targets = [target] + [f"{target}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan's algorithm)."""
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


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_engine_imports_another_back():
    graph = _import_graph()
    assert f"{PACKAGE}.codec" in graph[f"{PACKAGE}.stream"]  # the graph sees relative imports
    cycles = _cycles(graph)
    shown = ["\n  ".join(f"{m} imports {sorted(graph[m] & set(group))}" for m in group) for group in cycles]
    assert not cycles, "import cycles in the ZMTP engine:\n  " + "\n  ".join(shown)


def test_a_connection_reaches_its_owner_only_through_the_owner_interface():
    """``stream`` uses nothing of its owner beyond ``ConnectionOwner``'s methods, and reads
    its settings from ``Settings`` alone."""
    from spark_zmq.patterns.zmtp import owner, stream

    source = pathlib.Path(stream.__file__).read_text()
    interface = {name for name in vars(owner.ConnectionOwner) if not name.startswith("_")}
    used = set(re.findall(r"\bowner\.([a-z_]+)\b", source))  # its methods (the module is owner.X)
    assert used and used <= interface, f"stream uses {sorted(used - interface)} of its owner beyond the interface"
    fields = set(owner.Settings.__dataclass_fields__)
    read = set(re.findall(r"\bsettings\.([A-Za-z_]+)", source))
    assert read and read <= fields, f"stream reads {sorted(read - fields)} beyond Settings"
    above = _import_graph()[f"{PACKAGE}.stream"] & {f"{PACKAGE}.engine", f"{PACKAGE}.sessions"}
    assert not above, f"stream imports its owners {sorted(above)}"
