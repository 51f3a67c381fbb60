"""Every example in README.md and docs/*.md runs as written.

The fenced ```python and ```bash blocks are extracted and run; a block that only
illustrates (hosts of a real deployment, a fragment, a command that runs until stopped)
says so in its info string (```python title="illustrative"), a block for a cluster
(```bash title="cluster") runs on the multi-host bed instead
(tests/multihost/test_deployment_commands.py), and blocks of other
languages (```text, ```ini, ```yaml) are not code to run (a yaml block, a probe or
scrape configuration, must still parse). Well-known ports in a block are swapped
for free ones, so examples may say 5555 and the tests still run beside each other.
Python blocks run in one namespace per block holding ``spark``, the test session (as in
the pyspark shell); bash blocks run in a temporary directory with a timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_zmq.free_ports import free_tcp_port

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CLI_DIR = os.path.dirname(sys.executable)

pytestmark = pytest.mark.timeout(180)

_FENCE = re.compile(r"^(\s*)```(.*)$")
_PORT = re.compile(r"(?<=:)(5[5-9]\d\d|6\d\d\d|7\d\d\d)\b")
_HOST = re.compile(r"tcp://([^:/\s\"']+):")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    info: str
    code: str

    @property
    def illustrative(self) -> bool:
        return 'title="illustrative"' in self.info or 'title="cluster"' in self.info

    @property
    def runnable(self) -> bool:
        return self.lang in ("python", "bash") and not self.illustrative

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, with their info strings."""
    out, lines = [], path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, info = len(m.group(1)), m.group(2).strip()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:])
            i += 1
        i += 1
        out.append(
            Block(str(path.relative_to(ROOT)), start, info.split(" ")[0] if info else "", info, "\n".join(body) + "\n")
        )
    return out


ALL = [block for page in PAGES for block in blocks(page)]
FIRST_EXAMPLE = next(b for b in ALL if b.page == "README.md" and b.lang == "python")
OWN_PRODUCER = next(b for b in ALL if b.page == "README.md" and b.code.startswith("# producer.py"))
RUNNABLE = [b for b in ALL if b.runnable and b not in (FIRST_EXAMPLE, OWN_PRODUCER)]


def free_port() -> int:
    return free_tcp_port()


def localize(code: str, ports: dict[str, str]) -> str:
    """``code`` with each well-known port swapped for a free one (the same one for the same
    port throughout), after checking that it reaches no host but this one."""
    hosts = set(_HOST.findall(code)) - {"127.0.0.1", "*", "localhost"}
    assert not hosts, f"a runnable example may only reach this host, not {sorted(hosts)}; mark it illustrative"
    return _PORT.sub(lambda m: ports.setdefault(m.group(0), str(free_port())), code)


def test_every_block_says_what_it_is():
    assert len(ALL) > 40 and len(RUNNABLE) >= 6
    for block in ALL:
        assert block.lang, f"{block}: a fence without a language; say ```text for a diagram or output"
        assert block.lang in ("python", "bash", "text", "ini", "yaml"), f"{block}: {block.lang}"


def test_every_yaml_block_parses():
    """A probe or scrape configuration a reader copies is valid YAML."""
    yaml = pytest.importorskip("yaml")
    blocks_of_yaml = [block for block in ALL if block.lang == "yaml"]
    assert blocks_of_yaml
    for block in blocks_of_yaml:
        assert isinstance(yaml.safe_load(block.code), (dict, list)), block


def test_the_readme_install_and_test_commands_are_the_ones_that_set_up_and_pass_the_tests():
    readme = {b.code.strip() for b in blocks(ROOT / "README.md")}
    assert 'pip install -e ".[dev]"\npytest' in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'pip install -q -e ".[dev,docs]"' in ci and "python3 -m pytest" in ci


def _run_python(code: str, spark, tmp_path, monkeypatch) -> dict:
    monkeypatch.chdir(tmp_path)
    namespace = {"spark": spark, "__name__": "__docs__"}
    try:
        exec(compile(code, "<example>", "exec"), namespace)  # noqa: S102 - the docs' own examples
    finally:
        for query in spark.streams.active:
            query.stop()
    return namespace


@pytest.mark.spark
@pytest.mark.parametrize("block", [b for b in RUNNABLE if b.lang == "python"], ids=str)
def test_python_example_runs(block: Block, spark, tmp_path, monkeypatch):
    _run_python(localize(block.code, {}), spark, tmp_path, monkeypatch)


@pytest.mark.parametrize("block", [b for b in RUNNABLE if b.lang == "bash"], ids=str)
def test_bash_example_runs(block: Block, tmp_path):
    code = localize(block.code, {})
    env = dict(os.environ, PATH=CLI_DIR + os.pathsep + os.environ.get("PATH", ""))
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, (
        f"{block}:\n{code}\nstdout:\n{result.stdout[-2000:]}\nstderr:\n{result.stderr[-3000:]}"
    )


def _run_first_example(ports: dict[str, str], spark, tmp_path, monkeypatch) -> list:
    """The README's first stream once, fed 2,000 readings by ``spark-zmq produce --format
    json`` as the README says; the rows of its table."""
    code = localize(FIRST_EXAMPLE.code, ports)
    port = ports["5555"]
    producer = subprocess.Popen(
        [
            os.path.join(CLI_DIR, "spark-zmq"),
            "produce",
            f"tcp://127.0.0.1:{port}",
            "--format",
            "json",
            "--count",
            "2000",
            "--no-progress",
            "--linger",
            "120",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _run_python(code, spark, tmp_path, monkeypatch)
        out, err = producer.communicate(timeout=120)
    finally:
        producer.kill()
    assert producer.returncode == 0, err
    return spark.table("by_sensor").collect()


def test_the_readme_first_example_reads_what_spark_zmq_produce_sends(spark, tmp_path, monkeypatch):
    """The README's first stream, fed by ``spark-zmq produce --format json`` as the README
    says: every reading arrives, and its ``ts`` (epoch seconds) is a timestamp, not null."""
    rows = _run_first_example({}, spark, tmp_path, monkeypatch)
    assert sum(r["readings"] for r in rows) == 2000, rows
    assert rows and all(r["latest"] is not None and r["average"] is not None for r in rows), rows


def test_the_readme_first_example_run_again_counts_only_the_new_readings(spark, tmp_path, monkeypatch):
    """Run twice on the same port (so on the same default spool directory), as a newcomer
    trying it does: the second run counts its own 2,000 readings, not the first run's again.
    (An ``availableNow`` query ends without Spark telling the source its last batch was
    committed; the second query must still start at the latest offsets.)"""
    ports: dict[str, str] = {}
    first = _run_first_example(ports, spark, tmp_path, monkeypatch)
    second = _run_first_example(ports, spark, tmp_path, monkeypatch)
    assert sum(r["readings"] for r in first) == 2000, first
    assert sum(r["readings"] for r in second) == 2000, second


#: how long the README's ``spark-submit`` may take to bind after ``python producer.py &``
#: started (a JVM and a Spark session on a loaded machine): the producer's LINGER must cover it
JOB_START_S = 15
_LINGER = re.compile(r"zmq\.LINGER,\s*([\d_]+)")


def _lingering(thread: threading.Thread) -> bool:
    """Whether ``thread`` has sent everything and now waits in its context's close, where
    only the LINGER keeps its queued messages (pyzmq's ``Context.destroy``/``term``)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name in ("destroy", "term") and "zmq" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def test_the_readme_own_producer_delivers_every_message_to_a_job_that_binds_late(tmp_path, monkeypatch):
    """The README's pyzmq producer, started first as the README says, received by
    ``spark-zmq consume`` bound only once the producer has sent everything and is closing
    (where the job would be still starting): all 1,000 JSON readings arrive, its LINGER
    keeping them until a peer is there; and that LINGER outlasts a job's ``JOB_START_S``."""
    linger = _LINGER.search(OWN_PRODUCER.code)
    assert linger, "the README's producer sets no zmq.LINGER this test can read"
    assert int(linger.group(1).replace("_", "")) >= JOB_START_S * 1000, linger.group(0)
    ports: dict[str, str] = {}
    code = localize(OWN_PRODUCER.code, ports)
    monkeypatch.chdir(tmp_path)
    failed: list[BaseException] = []

    def produce() -> None:
        try:
            exec(compile(code, "<example>", "exec"), {"__name__": "__docs__"})  # noqa: S102
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    deadline = time.monotonic() + 30
    while not _lingering(producer):  # bind only once the LINGER alone holds the messages
        assert producer.is_alive() and not failed, f"the producer ended before a peer bound: {failed}"
        assert time.monotonic() < deadline, "the producer never reached its context's close"
        time.sleep(0.01)
    consumer = subprocess.Popen(
        [
            os.path.join(CLI_DIR, "spark-zmq"),
            "consume",
            f"@tcp://127.0.0.1:{ports['5555']}",
            "--format",
            "json",
            "--count",
            "1000",
            "--timeout",
            "30",
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = consumer.communicate(timeout=60)
    finally:
        consumer.kill()
    producer.join(60)
    assert not failed, failed
    assert not producer.is_alive(), "the producer did not exit once its messages were taken"
    assert consumer.returncode == 0, err
    assert "received 1000 messages" in out


_HISTORY = re.compile(
    r"\b(session \d+|sessions? \d+|round \d+|before and after|fixed, then reverted|"
    r"was reverted|until this release|the previous run|[0-9a-f]{7,40} and on this)\b",
    re.I,
)


@pytest.mark.parametrize("page", [*PAGES, ROOT / "bench" / "REPORT.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_describe_the_product_as_it_is(page: Path):
    """Development history goes to CHANGELOG.md: no session or round numbers, no before and
    after, no commit hashes as evidence in the README, docs/ or the bench report."""
    text = page.read_text(encoding="utf-8")
    found = sorted({m.group(0) for m in _HISTORY.finditer(text)})
    assert not found, f"{page.name}: {found}"
    assert len(text.splitlines()) <= 200 or page.name != "README.md"
