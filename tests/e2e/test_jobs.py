"""The jobs users run with spark-submit, run the same way, on real sockets, fed by the
``spark-zmq produce`` load generator where a job reads a PUSH stream."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest
import zmq

from spark_zmq.cli import loadgen
from spark_zmq.patterns import XPub

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPARK_SUBMIT = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")
READINGS = "seq long, sensor string, ts double, reading double"


def _env() -> dict:
    return dict(
        os.environ,
        SPARK_CONF_DIR=os.path.join(ROOT, "conf"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )


def _submit(*args: str, timeout: float = 280) -> subprocess.CompletedProcess:
    return subprocess.run([SPARK_SUBMIT, *args], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)


def _produce(endpoint: str, *args: str) -> subprocess.Popen:
    """``spark-zmq produce`` in its own process; it lingers until the job binds and drains it."""
    return subprocess.Popen(
        [CLI, "produce", endpoint, "--no-progress", "--linger", "200", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(producer: subprocess.Popen) -> str:
    out, err = producer.communicate(timeout=120)
    assert producer.returncode == 0, err
    return out


def test_spark_submit_quickstart_exits_zero_and_prints_its_summary():
    result = _submit("jobs/quickstart.py", "--messages", "3000", "--rate", "5000")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "spark-zmq quickstart" in out
    assert "rows in       3000" in out
    assert "lag              0" in out
    rows_out = int(out.split("rows out")[1].split()[0])
    assert 1 <= rows_out <= 8
    assert out.count("readings, average") == rows_out


def test_quickstart_reads_your_own_producer_on_endpoints(free_port):
    producer = _produce(f"tcp://127.0.0.1:{free_port}", "--format", "json", "--count", "2000")
    result = _submit("jobs/quickstart.py", "--endpoints", f"@tcp://*:{free_port}", "--no-producer")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sent 2000 messages" in _finish(producer)
    assert "rows in       2000" in result.stdout and "lag              0" in result.stdout
    # its spool is a temporary one no restart reads: its receiver stops with it, so the port
    # is free for the next run at once (a receiver lingering for a restart took a second
    # run's producer and spooled its messages where nothing reads them)
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("0.0.0.0", free_port))


def test_zmq_to_parquet_writes_every_message_once_across_a_restart(tmp_path, free_port):
    """Each message once across a restart, with the project's conf: its checkpoint file
    manager writes the local checkpoint without starting a ``readlink`` process on each
    rename, as Spark's default does without Hadoop's native library (a ``readlink`` first on
    PATH records every call)."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    calls, spy = tmp_path / "readlink-calls", tmp_path / "bin"
    spy.mkdir()
    (spy / "readlink").write_text(
        f'#!/bin/sh\necho "$@" >> {shlex.quote(str(calls))}\n'
        f'exec {shlex.quote(shutil.which("readlink") or "/bin/readlink")} "$@"\n'
    )
    (spy / "readlink").chmod(0o755)
    env = dict(_env(), PATH=f"{spy}{os.pathsep}{os.environ.get('PATH', '')}")
    job = [
        "jobs/zmq_to_parquet.py",
        "--endpoints",
        "@" + endpoint,
        "--format",
        "json",
        "--schema",
        READINGS,
        "--output",
        output,
        "--checkpoint",
        checkpoint,
        "--available-now",
        "--idle-timeout",
        "3",
    ]
    for run, start in enumerate((0, 4000)):
        producer = _produce(endpoint, "--format", "json", "--count", "4000", "--start", str(start))
        result = subprocess.run([SPARK_SUBMIT, *job], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "sent 4000 messages" in _finish(producer)
        assert "zmq_to_parquet: 4000 rows written" in result.stdout, (run, result.stdout)
    seqs = pq.read_table(output, columns=["seq"]).column("seq").to_pylist()
    assert sorted(seqs) == list(range(8000))  # each message once, across both runs
    assert os.listdir(os.path.join(checkpoint, "commits")), "no micro-batch was committed"
    spawned = calls.read_text().splitlines() if calls.exists() else []
    assert not [c for c in spawned if checkpoint in c], spawned[:5]


def test_zmq_to_parquet_with_curve_keeps_only_the_authorized_producers_messages(tmp_path, free_port):
    """The job as a CURVE server (``--curve-*``), fed by ``spark-zmq produce --curve-*``:
    the authorized producer's messages are written, a stranger's never."""
    keys, clients = tmp_path / "keys", tmp_path / "keys" / "clients"
    for directory, name in ((keys, "server"), (clients, "sensor"), (keys, "stranger")):
        made = subprocess.run(
            [CLI, "keygen", name, "--dir", str(directory)], capture_output=True, text=True, timeout=60
        )
        assert made.returncode == 0, made.stderr
    endpoint = f"tcp://127.0.0.1:{free_port}"
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    stranger = subprocess.Popen(
        [
            CLI,
            "produce",
            endpoint,
            "--no-progress",
            "--linger",
            "60",
            "--format",
            "json",
            "--count",
            "500",
            "--start",
            "100000",
            "--curve-certificate",
            str(keys / "stranger.key_secret"),
            "--curve-server-key",
            str(keys / "server.key"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    producer = _produce(
        endpoint,
        "--format",
        "json",
        "--count",
        "3000",
        "--curve-certificate",
        str(clients / "sensor.key_secret"),
        "--curve-server-key",
        str(keys / "server.key"),
    )
    result = _submit(
        "jobs/zmq_to_parquet.py",
        "--endpoints",
        "@" + endpoint,
        "--format",
        "json",
        "--schema",
        READINGS,
        "--output",
        output,
        "--checkpoint",
        checkpoint,
        "--available-now",
        "--idle-timeout",
        "3",
        "--curve-certificate",
        str(keys / "server.key_secret"),
        "--curve-authorized-keys",
        str(clients),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sent 3000 messages" in _finish(producer)
    stranger.kill()  # it retried its handshake throughout the job's run; nothing of it may arrive
    stranger.communicate(timeout=60)
    seqs = pq.read_table(output, columns=["seq"]).column("seq").to_pylist()
    assert sorted(seqs) == list(range(3000))


def test_windowed_topics_closes_windows_per_subscribed_topic(tmp_path, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    output = str(tmp_path / "windows")
    publisher = XPub("@" + endpoint, hwm=100_000, linger=5000)
    job = subprocess.Popen(
        [
            SPARK_SUBMIT,
            "jobs/windowed_topics.py",
            "--endpoints",
            endpoint,
            "--topics",
            "alpha,beta",
            "--window",
            "10 seconds",
            "--watermark",
            "10 seconds",
            "--output",
            output,
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--available-now",
            "--idle-timeout",
            "4",
        ],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        subscribed = {publisher.recv_subscription(timeout=120)[1] for _ in range(2)}
        assert subscribed == {b"alpha", b"beta"}
        # alpha: 30 readings in [1000, 1010) and 20 in [1010, 1020); beta: 10 and 5; gamma is
        # not subscribed. A last reading at t=1100 per topic moves the watermark past both windows.
        plan = [
            ("alpha", 1000.0, 30),
            ("alpha", 1010.0, 20),
            ("beta", 1000.0, 10),
            ("beta", 1010.0, 5),
            ("gamma", 1000.0, 7),
            ("alpha", 1100.0, 1),
            ("beta", 1100.0, 1),
        ]
        seq = 0
        for topic, start, count in plan:
            for i in range(count):
                body = f'{{"seq": {seq}, "sensor": "s", "ts": {start + i * 0.1}, "reading": 2.0}}'
                publisher.send([topic.encode(), body.encode()])
                seq += 1
        out, err = job.communicate(timeout=240)
    finally:
        if job.poll() is None:
            job.kill()
        publisher.close()
    assert job.returncode == 0, err[-3000:]
    rows = sorted((r["topic"], r["window_start"].timestamp(), r["readings"]) for r in pq.read_table(output).to_pylist())
    assert rows == [("alpha", 1000.0, 30), ("alpha", 1010.0, 20), ("beta", 1000.0, 10), ("beta", 1010.0, 5)]
    assert "67 messages in, 4 closed windows" in out


def test_pipeline_stage_transforms_arrow_batches_between_two_zeromq_peers(tmp_path, free_port):
    inbound = f"tcp://127.0.0.1:{free_port}"
    collector = zmq.Context.instance().socket(zmq.PULL)
    outbound_port = collector.bind_to_random_port("tcp://127.0.0.1")
    collected: list[pa.Table] = []
    done = threading.Event()

    def collect() -> None:
        while not done.is_set():
            if collector.poll(100):
                collected.append(pa.ipc.open_stream(collector.recv()).read_all())

    thread = threading.Thread(target=collect, daemon=True)
    thread.start()
    producer = _produce(inbound, "--format", "arrow", "--count", "20", "--rows-per-message", "500")
    try:
        result = _submit(
            "jobs/pipeline_stage.py",
            "--input",
            "@" + inbound,
            "--output",
            f"tcp://127.0.0.1:{outbound_port}",
            "--schema",
            READINGS,
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--rows-per-message",
            "700",
            "--sql",
            "SELECT seq, sensor, reading * 1.8 + 32 AS fahrenheit FROM input WHERE seq % 2 = 0",
            "--available-now",
            "--idle-timeout",
            "3",
        )
        _finish(producer)
    finally:
        done.set()
        thread.join(5)
        collector.close(linger=0)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pipeline_stage: 10000 rows in" in result.stdout
    got = pa.concat_tables(collected).sort_by("seq")
    sent = pa.concat_tables(
        pa.ipc.open_stream(p).read_all() for p, _ in loadgen.payloads("arrow", 20, rows_per_message=500)
    )
    expected = sent.filter(pa.compute.equal(pa.compute.bit_wise_and(sent["seq"], 1), 0))
    assert got["seq"].to_pylist() == expected["seq"].to_pylist()
    assert got["fahrenheit"].to_pylist() == pytest.approx([r * 1.8 + 32 for r in expected["reading"].to_pylist()])
    assert max(t.num_rows for t in collected) <= 700


def test_enrich_calls_a_rep_worker_for_every_row_and_writes_each_once(tmp_path, free_port):
    from servicetest import ServiceWorker

    inbound = f"tcp://127.0.0.1:{free_port}"
    output = tmp_path / "enriched"
    with ServiceWorker.start("--format", "arrow", "--bind", "tcp://127.0.0.1:*", "--column", "seq") as worker:
        producer = _produce(inbound, "--format", "json", "--count", "3000")
        result = _submit(
            "jobs/enrich.py",
            "--input",
            "@" + inbound,
            "--schema",
            READINGS,
            "--service",
            worker.endpoint,
            "--reply-schema",
            "doubled long, worker string",
            "--batch-rows",
            "250",
            "--timeout",
            "20s",
            "--output",
            str(output),
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--available-now",
            "--idle-timeout",
            "3",
        )
        _finish(producer)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "enrich: 3000 rows in" in result.stdout
    table = pq.read_table(str(output)).sort_by("seq")
    assert table["seq"].to_pylist() == list(range(3000))
    assert table["doubled"].to_pylist() == [2 * s for s in range(3000)]


#: a spark-defaults.conf in each form java.util.Properties (so Spark) reads: key<TAB>value,
#: key=value, key : value, key value, a `!` comment and a continued line
SPARK_DEFAULTS = (
    "# settings the conf check below expects back\n"
    "! another comment\n"
    "spark.master\tlocal[1]\n"
    "spark.sql.shuffle.partitions=3\n"
    "spark.sql.session.timeZone : Pacific/Auckland\n"
    "spark.ui.enabled false\n"
    "spark.sql.adaptive.enabled \\\n"
    "    false\n"
)
CONF_KEYS = (
    "spark.master",
    "spark.sql.shuffle.partitions",
    "spark.sql.session.timeZone",
    "spark.ui.enabled",
    "spark.sql.adaptive.enabled",
)
#: a job's session, with jobkit's project conf file named by argv[1]; prints what Spark has
CONF_CHECK = f"""
import sys
sys.path.insert(0, {os.path.join(ROOT, "jobs")!r})
import jobkit
jobkit.CONF = sys.argv[1]
spark = jobkit.session("spark-zmq-conf-check")
for key in {CONF_KEYS!r}:
    print(f"{{key}} -> {{spark.conf.get(key)}}")
spark.stop()
"""


@pytest.mark.parametrize("run", ["python", "spark-submit", "spark-submit with SPARK_CONF_DIR"])
def test_spark_defaults_are_read_by_spark_in_every_properties_form(run, tmp_path):
    """The job's conf file reaches Spark as Spark parses it (tab, '=', ':' and space
    separated lines alike): under plain python as the JVM's properties file, under
    spark-submit filling in what spark-submit left unset, and under spark-submit with
    SPARK_CONF_DIR Spark's own reading of that directory wins over the project's file."""
    conf_dir, empty_dir = tmp_path / "conf", tmp_path / "empty"
    conf_dir.mkdir()
    empty_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(SPARK_DEFAULTS)
    script = tmp_path / "conf_check.py"
    script.write_text(CONF_CHECK)
    env = dict(_env(), SPARK_CONF_DIR=str(empty_dir))
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    expected = {
        "spark.master": "local[1]",
        "spark.sql.shuffle.partitions": "3",
        "spark.sql.session.timeZone": "Pacific/Auckland",
        "spark.ui.enabled": "false",
        "spark.sql.adaptive.enabled": "false",
    }
    if run == "python":
        command = [sys.executable, str(script), str(conf_dir / "spark-defaults.conf")]
    elif run == "spark-submit":
        command = [SPARK_SUBMIT, str(script), str(conf_dir / "spark-defaults.conf")]
        expected["spark.master"] = "local[*]"  # spark-submit's own master wins over the file's
    else:  # the directory's file, read by spark-submit, wins over the project's (shuffle partitions 2)
        env["SPARK_CONF_DIR"] = str(conf_dir)
        command = [SPARK_SUBMIT, str(script), os.path.join(ROOT, "conf", "spark-defaults.conf")]
    result = subprocess.run(command, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    got = dict(line.split(" -> ", 1) for line in result.stdout.splitlines() if " -> " in line)
    assert got == expected, result.stdout


#: a job's session with the project's conf (or the file argv[1] names); a Python task reports
#: what kind of socket its worker holds: the kernel's tables say which of its sockets are
#: Unix and which TCP
SOCKET_CHECK = f"""
import os, sys
sys.path.insert(0, {os.path.join(ROOT, "jobs")!r})
import jobkit
if len(sys.argv) > 1:
    jobkit.CONF = sys.argv[1]
spark = jobkit.session("spark-zmq-socket-check")

def sockets(_):
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{{fd}}")
        except OSError:
            continue
        if link.startswith("socket:["):
            held.add(link[len("socket:["):-1])
    def inodes(table, column):
        with open(table) as rows:
            return {{row.split()[column] for row in list(rows)[1:] if len(row.split()) > column}}
    tcp = inodes("/proc/self/net/tcp", 9) | inodes("/proc/self/net/tcp6", 9)
    yield f"unix={{len(held & inodes('/proc/self/net/unix', 6))}} tcp={{len(held & tcp)}}"

print("worker sockets:", spark.sparkContext.parallelize([0], 1).mapPartitions(sockets).collect()[0])
spark.stop()
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/net/unix"), reason="reads the socket tables of Linux's /proc")
@pytest.mark.parametrize("conf", ["project", "without the socket line"])
def test_the_project_conf_runs_python_workers_on_a_unix_socket(conf, tmp_path):
    """conf/spark-defaults.conf puts Spark's JVM and its Python workers on a Unix socket
    (docs/performance.md, "Python workers on a Unix socket"): a job's Python task talks to
    the JVM over one and holds no TCP socket. The same conf without that line gives Spark's
    default, loopback TCP, which is what the check tells apart."""
    script = tmp_path / "socket_check.py"
    script.write_text(SOCKET_CHECK)
    command = [sys.executable, str(script)]
    if conf != "project":
        trimmed = tmp_path / "spark-defaults.conf"
        with open(os.path.join(ROOT, "conf", "spark-defaults.conf")) as project:
            trimmed.write_text("".join(line for line in project if "unix.domain.socket" not in line))
        command.append(str(trimmed))
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    env = dict(_env(), SPARK_CONF_DIR=str(empty_dir))  # only the file under test, not the project's as well
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    result = subprocess.run(command, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = "unix=1 tcp=0" if conf == "project" else "unix=0 tcp=1"
    assert f"worker sockets: {expected}" in result.stdout, result.stdout + result.stderr[-2000:]


@pytest.mark.parametrize(
    "job, args, message",
    [
        ("jobs/quickstart.py", ["--messages", "zero"], "invalid int value"),
        ("jobs/quickstart.py", ["--no-producer"], "--no-producer needs --endpoints"),
        ("jobs/quickstart.py", ["--endpoints", ">tcp://h:1"], "a source that connects out needs --no-producer"),
        ("jobs/zmq_to_parquet.py", ["--endpoints", "@tcp://*:5555", "--output", "o"], "--checkpoint"),
        (
            "jobs/zmq_to_parquet.py",
            ["--endpoints", "@tcp://*:5555", "--output", "o", "--checkpoint", "c"],
            "--schema is required for --format json",
        ),
        (
            "jobs/zmq_to_parquet.py",
            ["--endpoints", "x", "--output", "o", "--checkpoint", "c", "--format", "xml"],
            "invalid choice: 'xml'",
        ),
        (
            "jobs/zmq_to_parquet.py",
            ["--endpoints", "@tcp://*:1", "--output", "o", "--checkpoint", "s3a://b/c", "--format", "raw"],
            "--spool-dir is required",
        ),
        (
            "jobs/windowed_topics.py",
            ["--endpoints", "tcp://h:1", "--output", "o", "--checkpoint", "c", "--idle-timeout", "0"],
            "--idle-timeout must be > 0",
        ),
        ("jobs/pipeline_stage.py", ["--input", "@tcp://*:1", "--output", "tcp://h:2", "--checkpoint", "c"], "--schema"),
        (
            "jobs/pipeline_stage.py",
            [
                "--input",
                "@tcp://*:1",
                "--output",
                "tcp://h:2",
                "--checkpoint",
                "c",
                "--schema",
                "a long",
                "--rows-per-message",
                "-1",
            ],
            "--rows-per-message must be > 0",
        ),
        (
            "jobs/enrich.py",
            [
                "--input",
                "@tcp://*:1",
                "--schema",
                "a long",
                "--service",
                "tcp://h:2",
                "--reply-schema",
                "b long",
                "--output",
                "o",
                "--checkpoint",
                "c",
                "--timeout",
                "soon",
            ],
            "--timeout",
        ),
        (
            "jobs/enrich.py",
            [
                "--input",
                "@tcp://*:1",
                "--schema",
                "a long",
                "--service",
                "tcp://h:2",
                "--reply-schema",
                "b long",
                "--checkpoint",
                "c",
            ],
            "--output --push",
        ),
    ],
)
def test_jobs_reject_bad_arguments_with_usage_not_a_traceback(job, args, message):
    result = subprocess.run([sys.executable, job, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "usage:" in result.stderr and message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("job", ["quickstart", "zmq_to_parquet", "windowed_topics", "pipeline_stage", "enrich"])
def test_every_job_documents_its_arguments_in_help(job):
    result = subprocess.run(
        [sys.executable, f"jobs/{job}.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "usage:" in result.stdout and "--master" in result.stdout
