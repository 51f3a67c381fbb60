"""The engine's shape (``spark_zmq.patterns.zmtp``): its modules import one way, and a
connection's protocol object reaches the socket only through ``owner.ConnectionOwner``.

Both read the source (``ast``), not the running program, and take the package from
wherever ``spark_zmq`` is imported: run with ``PYTHONPATH`` at another tree to check that
tree.
"""

from __future__ import annotations

import pathlib
import re

from import_graph import cycles, describe, import_graph

PACKAGE = "spark_zmq.patterns.zmtp"


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
    from spark_zmq.patterns.zmtp import owner, stream

    source = pathlib.Path(stream.__file__).read_text()
    interface = {name for name in vars(owner.ConnectionOwner) if not name.startswith("_")}
    used = set(re.findall(r"\bowner\.([a-z_]+)\b", source))  # its methods (the module is owner.X)
    assert used and used <= interface, f"stream uses {sorted(used - interface)} of its owner beyond the interface"
    fields = set(owner.Settings.__dataclass_fields__)
    read = set(re.findall(r"\bsettings\.([A-Za-z_]+)", source))
    assert read and read <= fields, f"stream reads {sorted(read - fields)} beyond Settings"
    above = import_graph(PACKAGE)[f"{PACKAGE}.stream"] & {f"{PACKAGE}.engine", f"{PACKAGE}.sessions"}
    assert not above, f"stream imports its owners {sorted(above)}"
