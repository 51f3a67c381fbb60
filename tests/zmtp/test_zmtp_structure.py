"""The engine's shape (``spark_zmq.patterns.wires.zmtp``): its modules import one way, a
connection's protocol object reaches the socket only through ``owner.ConnectionOwner``, and
the session manager is an object the engine holds, which reads only what it was given.

They read the source (``ast``), not the running program, and take the package from
wherever ``spark_zmq`` is imported: run with ``PYTHONPATH`` at another tree to check that
tree.
"""

from __future__ import annotations

import ast
import pathlib
import re

from import_graph import cycles, describe, import_graph

PACKAGE = "spark_zmq.patterns.wires.zmtp"


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_engine_imports_another_back():
    graph = import_graph(PACKAGE)
    assert f"{PACKAGE}.codec" in graph[f"{PACKAGE}.stream"]  # the graph sees relative imports
    found = cycles(graph)
    assert not found, "import cycles in the ZMTP engine:\n  " + describe(graph, found)


def test_a_connection_reaches_its_owner_only_through_the_owner_interface():
    """``stream`` uses nothing of its owner beyond ``ConnectionOwner``'s methods, and reads
    its settings from ``Settings`` alone."""
    from spark_zmq.patterns.wires.zmtp import owner, stream

    source = pathlib.Path(stream.__file__).read_text()
    interface = {name for name in vars(owner.ConnectionOwner) if not name.startswith("_")}
    used = set(re.findall(r"\bowner\.([a-z_]+)\b", source))  # its methods (the module is owner.X)
    assert used and used <= interface, f"stream uses {sorted(used - interface)} of its owner beyond the interface"
    fields = set(owner.Settings.__dataclass_fields__)
    read = set(re.findall(r"\bsettings\.([A-Za-z_]+)", source))
    assert read and read <= fields, f"stream reads {sorted(read - fields)} beyond Settings"
    above = import_graph(PACKAGE)[f"{PACKAGE}.stream"] & {f"{PACKAGE}.engine", f"{PACKAGE}.sessions"}
    assert not above, f"stream imports its owners {sorted(above)}"


def _self_names(cls: ast.ClassDef) -> tuple[set[str], set[str]]:
    """``(read, set)``: the ``self.<name>`` a class's methods read (``self.n += 1`` reads
    too), and the names it sets (``self.<name> = ...`` anywhere, tuple targets too) or
    defines (methods, properties). Class-level annotations set nothing."""
    read: set[str] = set()
    assigned = {node.name for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    augmented = {id(node.target) for node in ast.walk(cls) if isinstance(node, ast.AugAssign)}
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            loaded = isinstance(node.ctx, ast.Load) or id(node) in augmented
            (read if loaded else assigned).add(node.attr)
    return read, assigned


def test_the_self_reader_tells_given_from_declared():
    source = """
class Declared:
    lock: object
    def __init__(self):
        self._given = 1
        self.a, self.b = 2, 3
    def run(self):
        self.count += 1
        return self.lock, self._given, self.a, self.b, self.run
"""
    read, assigned = _self_names(ast.parse(source).body[0])
    assert read - assigned == {"lock", "count"}


def test_the_engine_holds_its_session_manager_and_inherits_nothing_of_it():
    from spark_zmq.patterns.wires.zmtp import engine, sessions

    inherited = [cls.__qualname__ for cls in engine.Engine.__mro__ if cls.__module__ == sessions.__name__]
    assert not inherited, f"Engine inherits the session manager {inherited}"
    eng = engine.Engine(
        socket_type=b"GATHER", peer_types={b"SCATTER": b"GATHER"}, label="structure", hwm=0, max_message_bytes=None
    )
    try:
        held = [name for name, value in vars(eng).items() if isinstance(value, sessions.Sessions)]
    finally:
        eng.stop()
    assert len(held) == 1, f"Engine holds {held} of the session manager"


def test_the_session_manager_reads_only_what_it_was_given():
    """Every ``self.<name>`` the classes of ``sessions`` read is set by the class itself
    (given to ``__init__``, or its own state) or is one of its methods: nothing of the
    engine is reached through ``self``."""
    from spark_zmq.patterns.wires.zmtp import sessions

    tree = ast.parse(pathlib.Path(sessions.__file__).read_text())
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert classes
    for cls in classes:
        read, assigned = _self_names(cls)
        assert not read - assigned, f"sessions.{cls.name} reads {sorted(read - assigned)} it was not given"
