"""The package's layers: what may import what, and pyspark only where Spark is used.

Layers, bottom up: ``patterns`` (ZeroMQ only) < ``options`` < ``ingest`` (receive, spool,
serve) < ``relay`` < ``source``; ``arrow`` (reading untrusted Arrow within bounds) on
nothing, under ``ingest``, ``source``, ``requester`` and ``requestreply``; ``sink`` sits on
``patterns``, ``options`` and ``sparkglue.schemas``; ``requestreply`` (the Guide's request-reply
applications: the client, the broker, the service worker and its handler's process) on
``patterns``, ``arrow`` (every request a worker serves is read through it) and ``metrics``;
``requester`` (calling ZeroMQ services from Spark) on ``patterns``, ``options``, ``arrow``,
``sparkglue.schemas`` and ``requestreply`` (its client, and the worker's error reply it reads);
``worker`` (``spark_zmq.worker``, the public name of ``requestreply.worker``) on
``requestreply`` only;
``errors`` (the root of every error, ``SparkZmqError``) on nothing, under every layer;
``procstat`` (what ``/proc`` says of a process) and ``free_ports`` (ports for endpoints
the jobs, benchmarks and tests bind) on nothing; ``metrics`` (the services' Prometheus
endpoints, which ``options``, ``relay``, ``source`` and ``requestreply`` use) on nothing;
``sparkglue`` (what binds the connector to Spark's APIs) holds modules of different layers,
each a layer of its own (``SPLIT_PACKAGES``): ``sparkglue.schemas`` (the Spark schemas the
source, the sink and the requester share) and ``sparkglue.thread_session`` on nothing,
``sparkglue.datasource`` and ``sparkglue.worker_env`` entry points; the entry points
(``datasource``, ``sparkglue.datasource``, ``cli`` (with the load generator, ``cli.loadgen``), ``sparkglue.worker_env``,
the package's ``__init__``) may import anything. A module importing a layer above its own, or a layer it
does not need, makes a cycle possible and drags Spark into processes that never run it
(a relay, a receiver process, a worker service). One exception, ``LAZY_REEXPORTS``: the
pattern package also offers the request-reply package's ``Client``, ``Broker``, ... (as
``spark_zmq.patterns.Client``), loaded only when first used (never by ``import spark_zmq.patterns``).
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest
from import_graph import cycles, describe, from_target, import_graph, module_name

import spark_zmq

pytestmark = pytest.mark.timeout(120)

PACKAGE = pathlib.Path(spark_zmq.__file__).parent

#: layer -> the layers it may import (besides itself)
ALLOWED = {
    "errors": set(),
    "procstat": set(),
    "free_ports": set(),
    "arrow": set(),
    "patterns": set(),
    "metrics": set(),
    "task_gc": set(),
    "options": {"patterns", "metrics"},
    "ingest": {"patterns", "options", "arrow"},
    "relay": {"ingest", "patterns", "options", "procstat", "metrics"},
    "source": {
        "relay",
        "ingest",
        "arrow",
        "patterns",
        "options",
        "sparkglue.schemas",
        "procstat",
        "metrics",
        "task_gc",
    },
    "sparkglue": set(),
    "sparkglue.schemas": set(),
    "sparkglue.thread_session": set(),
    "sink": {"patterns", "options", "sparkglue.schemas", "task_gc", "arrow"},
    "requestreply": {"patterns", "arrow", "metrics"},
    "requester": {"patterns", "options", "arrow", "sparkglue.schemas", "requestreply"},
    "worker": {"requestreply"},
}
#: ``errors`` (the root of the package's errors, ``SparkZmqError``) imports nothing, and every layer may import it
for _layer, _allowed in ALLOWED.items():
    if _layer != "errors":
        _allowed.add("errors")
ENTRY_POINTS = {"__init__", "datasource", "sparkglue.datasource", "cli", "sparkglue.worker_env"}
#: packages whose modules are each a layer of their own (``sparkglue.schemas``), as they sit on different layers
SPLIT_PACKAGES = {"sparkglue"}
#: module -> layers above its own that it imports only on first use of a name it re-exports
#: (a module ``__getattr__``; and for the type checker): ``spark_zmq.patterns.Client``,
#: ``spark_zmq.patterns.Broker``, ... are ``spark_zmq.requestreply``'s
LAZY_REEXPORTS = {"spark_zmq.patterns": {"requestreply"}}

#: modules a process that never runs Spark imports, and the source's exactly-once rules
#: (tested without Spark): none may load pyspark
SPARK_FREE = [
    "spark_zmq",
    "spark_zmq.patterns",
    "spark_zmq.options",
    "spark_zmq.arrow",
    "spark_zmq.ingest.runtime",
    "spark_zmq.ingest.fetch",
    "spark_zmq.ingest.spool_reader",
    "spark_zmq.relay.server",
    "spark_zmq.relay.run",
    "spark_zmq.relay.child",
    "spark_zmq.relay.client",
    "spark_zmq.relay.processes",
    "spark_zmq.requester.call",
    "spark_zmq.requester.codec",
    "spark_zmq.requestreply",
    "spark_zmq.requestreply.worker",
    "spark_zmq.requestreply.worker_process",
    "spark_zmq.worker",
    "spark_zmq.source.exactly_once",
    "spark_zmq.free_ports",
]


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in SPLIT_PACKAGES and parts[2] != "__init__":
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """``(line, absolute module)`` of every import of the package in ``path``."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    package = package.removesuffix(".__init__")
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            target = from_target(package, node)
            targets = [target] if node.module else [f"{target}.{alias.name}" for alias in node.names]
            found += [(node.lineno, t) for t in targets]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, t) for line, t in found if t == "spark_zmq" or t.startswith("spark_zmq.")]


def test_every_module_imports_only_its_own_layer_and_those_below():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _layer(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        if own in ENTRY_POINTS:
            continue
        assert own in ALLOWED, f"{path}: a module outside every layer ({own}); add it to ALLOWED"
        lazy = LAZY_REEXPORTS.get(module_name(path), set())
        for line, target in _imports(path):
            layer = _layer(target)
            if layer != own and layer not in ALLOWED[own] and layer not in lazy:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({own}) imports {target} ({layer})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_pattern_package_loads_the_request_reply_names_only_when_first_used():
    """``import spark_zmq.patterns`` loads nothing of ``spark_zmq.requestreply`` (the socket
    API stays below it), and the names it re-exports are the request-reply package's own."""
    code = (
        "import sys\n"
        "import spark_zmq.patterns as p\n"
        "print(sorted(m for m in sys.modules if m.startswith('spark_zmq.requestreply')))\n"
        "names = ('Broker', 'BrokerStats', 'Client', 'RequestTimeoutError')\n"
        "found = [getattr(p, n) for n in names]\n"
        "import spark_zmq.requestreply as r\n"
        "print(all(f is getattr(r, n) for f, n in zip(found, names)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["[]", "True"], result.stdout


def test_a_receiver_process_without_curve_loads_neither_zap_nor_arrow_compute():
    """A receiver process (``spark_zmq.relay.child``, one per channel and query start)
    imports neither pyzmq's ZAP thread (asyncio and ssl with it) nor ``pyarrow.compute``:
    about 70 ms of import time (``python -X importtime``) at every query's start that a receiver without CURVE, reading raw messages,
    never uses; CURVE servers and Arrow conversion load them when first used."""
    code = (
        "import sys\n"
        "import spark_zmq.relay.child\n"
        "print(sorted(m for m in ('asyncio', 'ssl', 'zmq.auth.thread', 'pyarrow.compute') if m in sys.modules))\n"
        "from spark_zmq.patterns.curve import secure_context, _register\n"
        "_register(secure_context(), '*').release()\n"
        "print('zmq.auth.thread' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["[]", "True"], result.stdout


def test_no_module_of_the_package_imports_another_back():
    """No import cycle anywhere in the package, counting the imports made only for the
    type checker and those inside functions: a cycle is two modules a reader cannot
    understand one without the other, whatever the interpreter tolerates."""
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n  " + describe(graph, found)


#: the longest a module of the package may be: past it, a module holds more than one job
MAX_MODULE_LINES = 500


def test_every_module_is_shorter_than_the_limit():
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in sorted(PACKAGE.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) >= MAX_MODULE_LINES
    }
    assert not long, f"modules of {MAX_MODULE_LINES} lines or more (split them by job): {long}"


def test_the_spark_free_modules_never_load_pyspark():
    code = (
        "import sys\n"
        f"for name in {SPARK_FREE!r}:\n"
        "    __import__(name)\n"
        "loaded = sorted(m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.'))\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"pyspark loaded by {SPARK_FREE}: {result.stdout.strip()}"


def test_both_ingests_offer_everything_the_reader_uses_of_an_ingest():
    """``source.reader_ingest.Ingest`` is the reader's whole view of an ingest: the driver's own
    (``LocalIngest``) and relays (``RelayIngest``) both offer every method and property of
    it, and the reader (with its exactly-once rules) uses nothing else of them."""
    import inspect
    import re

    from spark_zmq.source import exactly_once, stream
    from spark_zmq.source.reader_ingest import Ingest, LocalIngest
    from spark_zmq.source.relays import RelayIngest

    members = {name for name, _ in inspect.getmembers(Ingest) if not name.startswith("_")}
    data = set(Ingest.__annotations__)
    assert {"spool_range", "latest", "release", "stop", "spool_id"} <= members and "channels" in data
    for cls in (LocalIngest, RelayIngest):
        missing = [name for name in members if not hasattr(cls, name)]
        assert not missing, f"{cls.__name__} lacks {missing}"
        source = "".join(inspect.getsource(k.__init__) for k in cls.__mro__[:-1] if "__init__" in vars(k))
        unset = [
            name for name in data if not re.search(rf"self\.{name}\s*(:[^=\n]*)?=", source) and not hasattr(cls, name)
        ]
        assert not unset, f"{cls.__name__} never sets {unset}"
    used = set(re.findall(r"\bruntime\.([a-z_]+)", inspect.getsource(stream)))
    used |= set(re.findall(r"\bself\._runtime\.([a-z_]+)", inspect.getsource(stream)))
    used |= set(re.findall(r"\bingest\.([a-z_]+)", inspect.getsource(exactly_once.ExactlyOnce)))
    assert used <= members | data, f"the reader uses {sorted(used - members - data)} beyond the Ingest interface"


def test_the_ingest_and_the_sink_hold_their_data_sockets_as_the_wire_contract_only():
    """The pattern layer chooses the wire of each data pattern (``patterns.wires``): the
    receivers, the bounded batch read and the sink's sender import no socket class, and use
    nothing of their sockets beyond ``ReceivingWire``/``SendingWire`` (``wires.contract``)."""
    import inspect
    import re

    from spark_zmq.ingest import receiver, runtime
    from spark_zmq.patterns.wires import contract as wire_contract
    from spark_zmq.sink import send
    from spark_zmq.source import batch

    concrete = {
        "PatternSocket",
        "Pull",
        "Push",
        "ZmtpPull",
        "Gather",
        "Scatter",
        "ReroutingPush",
        "Sub",
        "Pub",
        "XPub",
        "XSub",
        "ZmtpPatternSocket",
        "socket_for",
        "PATTERNS",
        "LibzmqWire",
        "EngineWire",
        "XPubWire",
        "RouterWire",
    }
    for module in (receiver, runtime, batch, send):
        names = {target.rsplit(".", 1)[-1] for _, target in _imports(pathlib.Path(module.__file__))}
        modules = {target for _, target in _imports(pathlib.Path(module.__file__))}
        assert not names & concrete, f"{module.__name__} imports {sorted(names & concrete)}"
        classes = [
            m
            for m in modules
            if re.search(
                r"\.(pipeline|pubsub|scattergather|zmtppull|reroutingpush|base|wires\.libzmq|wires\.engine)\b", m
            )
        ]
        assert not classes, f"{module.__name__} imports {classes}"
        assert not re.search(r"isinstance\((self\.)?sock", inspect.getsource(module)), module.__name__
    receiving = {n for k in (wire_contract.Wire, wire_contract.ReceivingWire) for n in vars(k) if not n.startswith("_")}
    sending = {n for k in (wire_contract.Wire, wire_contract.SendingWire) for n in vars(k) if not n.startswith("_")}
    used_receiving = set(re.findall(r"\bself\.socket\.([a-z_]+)", inspect.getsource(receiver.Receiver)))
    used_receiving |= set(re.findall(r"\breceiver\.socket\.([a-z_]+)", inspect.getsource(runtime)))
    used_receiving |= set(re.findall(r"\bsocket\.([a-z_]+)", inspect.getsource(batch.receive_bounded)))
    used_sending = set(re.findall(r"\b(?:self\.socket|sock)\.([a-z_]+)", inspect.getsource(send.TaskSender)))
    assert {"recv_values", "close"} <= used_receiving <= receiving, sorted(used_receiving - receiving)
    assert {"send_many", "unsent"} <= used_sending <= sending, sorted(used_sending - sending)


def test_every_error_of_the_package_derives_from_its_root_and_keeps_its_builtin_base():
    """``except spark_zmq.errors.SparkZmqError`` catches any error the package raises, and
    the builtin base each had (what callers caught before) still catches it."""
    import importlib
    import pkgutil

    from spark_zmq.errors import SparkZmqError

    found = {}
    for module in pkgutil.walk_packages(spark_zmq.__path__, "spark_zmq."):
        if module.name.endswith("__main__"):
            continue
        loaded = importlib.import_module(module.name)
        for name, value in vars(loaded).items():
            if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == module.name:
                found[f"{module.name}.{name}"] = value
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, SparkZmqError))
    assert outside == [], f"errors not under SparkZmqError: {outside}"
    from spark_zmq.ingest.spool_files import SpoolSecurityError
    from spark_zmq.options import OptionError
    from spark_zmq.patterns.deadlines import SendTimeoutError

    assert issubclass(OptionError, ValueError) and issubclass(SendTimeoutError, TimeoutError)
    assert issubclass(SpoolSecurityError, PermissionError)
    assert len(found) >= 25
