"""The ``spark-zmq`` command line: produce and consume across processes, on real sockets,
and against a real Spark write."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import zmq

pytestmark = pytest.mark.timeout(120)

CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")


def _cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def _consumer(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [CLI, "consume", "--no-progress", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize(
    "fmt, count, rows", [("raw", 5000, 5000), ("text", 3000, 3000), ("json", 3000, 3000), ("arrow", 12, 12 * 250)]
)
def test_produce_to_consume_counts_every_message(free_port, fmt, count, rows):
    consumer = _consumer(f"@tcp://127.0.0.1:{free_port}", "--format", fmt, "--count", str(count), "--timeout", "60")
    produced = _cli(
        "produce",
        f"tcp://127.0.0.1:{free_port}",
        "--no-progress",
        "--format",
        fmt,
        "--count",
        str(count),
        "--rows-per-message",
        "250",
    )
    out, err = consumer.communicate(timeout=90)
    assert produced.returncode == 0, produced.stderr
    assert f"sent {count} messages ({rows} rows" in produced.stdout
    assert consumer.returncode == 0, err
    assert f"received {count} messages ({rows} rows" in out


def test_consume_prints_messages_and_produce_paces_them(free_port):
    consumer = _consumer(
        f"@tcp://127.0.0.1:{free_port}", "--format", "json", "--count", "20", "--timeout", "60", "--print"
    )
    produced = _cli("produce", f"tcp://127.0.0.1:{free_port}", "--no-progress", "--count", "20", "--rate", "100")
    out, err = consumer.communicate(timeout=90)
    assert produced.returncode == 0 and consumer.returncode == 0, err
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert [int(line.split('"seq": ')[1].split(",")[0]) for line in lines] == list(range(20))
    assert float(produced.stdout.split(" in ")[1].split(" s")[0]) >= 0.19  # 20 messages at 100/s


def test_consume_gives_up_after_idle_timeout_with_exit_1(free_port):
    result = _cli("consume", f"@tcp://127.0.0.1:{free_port}", "--no-progress", "--count", "5", "--timeout", "0.3")
    assert result.returncode == 1
    assert "received 0 of 5 messages" in result.stderr


def test_produce_whose_send_times_out_exits_1_without_lingering_its_30_s(free_port):
    """Nobody takes the messages: the queue (--hwm 10) fills and the next send waits
    --send-timeout (1 s), then fails. What is still queued gets that long again to leave,
    not the default 30 s linger: the command ends in seconds, with exit 1 and the reason."""
    result = _cli(
        "produce",
        f"tcp://127.0.0.1:{free_port}",
        "--no-progress",
        "--count",
        "100",
        "--hwm",
        "10",
        "--send-timeout",
        "1",
        timeout=25,
    )
    assert result.returncode == 1, result.stderr
    assert "timed out" in result.stderr


def test_consume_on_a_port_in_use_fails_clearly(free_port):
    holder = zmq.Context.instance().socket(zmq.PULL)
    holder.bind(f"tcp://127.0.0.1:{free_port}")
    try:
        result = _cli("consume", f"@tcp://127.0.0.1:{free_port}", "--no-progress", "--timeout", "5")
    finally:
        holder.close(linger=0)
    assert result.returncode == 1
    assert "cannot open pull" in result.stderr and "Address already in use" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["produce", "tcp://127.0.0.1:x"], "invalid ZeroMQ endpoint"),
        (["produce", "tcp://127.0.0.1:1", "--format", "xml"], "'xml' is not one of"),
        (["produce", "tcp://127.0.0.1:1", "--count", "-1"], "--count"),
        (["produce", "tcp://127.0.0.1:1", "--pattern", "pull"], "'pull' is not one of"),
        (["consume", "@tcp://127.0.0.1:1", "--pattern", "push"], "'push' is not one of"),
        (["consume"], "Missing argument 'endpoints'"),
        (["transmit"], "No such command 'transmit'"),
    ],
)
def test_bad_arguments_give_usage_and_exit_2(args, message):
    result = _cli(*args)
    assert result.returncode == 2, result.stderr
    assert "Usage:" in result.stderr and message in " ".join(result.stderr.replace("│", " ").split())
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["produce", "consume"])
def test_every_command_has_help(command):
    result = _cli(command, "--help")
    assert result.returncode == 0 and "Usage:" in result.stdout and "--count" in result.stdout


def test_the_program_help_says_what_every_command_does():
    result = _cli("--help")
    text = " ".join(result.stdout.replace("│", " ").split())
    assert result.returncode == 0
    assert "send and count test traffic (produce, consume)" in text
    for word in ("relay", "broker", "CURVE key pairs (keygen)"):
        assert word in text


@pytest.mark.spark
def test_consume_receives_a_spark_batch_write(spark, free_port):
    consumer = _consumer(f"@tcp://127.0.0.1:{free_port}", "--format", "arrow", "--timeout", "60", "--count", "4")
    df = spark.range(0, 10_000, numPartitions=4).selectExpr("id", "id * 2 AS doubled")
    (
        df.write.format("zmq")
        .mode("append")
        .option("pattern", "push")
        .option("endpoints", f"tcp://127.0.0.1:{free_port}")
        .option("format", "arrow")
        .save()
    )
    out, err = consumer.communicate(timeout=90)
    assert consumer.returncode == 0, err
    assert "received 4 messages (10000 rows" in out


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "command, flag, value",
    [
        ("consume", "--heartbeat-ttl", "7000"),
        ("consume", "--heartbeat-timeout", "0"),
        ("produce", "--heartbeat-interval", "-1"),
        ("relay", "--heartbeat-ttl", "7000"),
        ("relay", "--heartbeat-interval", "abc"),
    ],
)
def test_bad_heartbeat_flags_name_the_flag_and_what_is_valid(tmp_path, command, flag, value):
    args = {
        "consume": ["consume", "--no-progress", "@tcp://127.0.0.1:5999"],
        "produce": ["produce", "--no-progress", "tcp://127.0.0.1:5999", "--count", "1"],
        "relay": [
            "relay",
            "--endpoints",
            "@tcp://127.0.0.1:5999",
            "--listen",
            "tcp://127.0.0.1:5998",
            "--spool-dir",
            str(tmp_path / "spool"),
        ],
    }[command]
    result = _cli(*args, flag, value)
    assert result.returncode == 2, result
    text = " ".join(result.stderr.split())
    assert flag in text and ("6553.5" in text or "> 0" in text or ">= 0" in text or "not a number" in text), text


@pytest.mark.timeout(120)
def test_consume_and_produce_run_with_heartbeats_of_their_own(free_port):
    consumer = _consumer(
        f"@tcp://127.0.0.1:{free_port}",
        "--count",
        "200",
        "--heartbeat-interval",
        "0.1",
        "--heartbeat-timeout",
        "1",
        "--heartbeat-ttl",
        "1",
    )
    try:
        produced = _cli(
            "produce",
            "--no-progress",
            f"tcp://127.0.0.1:{free_port}",
            "--count",
            "200",
            "--format",
            "raw",
            "--heartbeat-interval",
            "0.1",
            "--heartbeat-timeout",
            "1",
        )
        assert produced.returncode == 0, produced.stderr
        out, err = consumer.communicate(timeout=60)
        assert consumer.returncode == 0, err
        assert "200" in out
    finally:
        if consumer.poll() is None:
            consumer.kill()


#: the producer's linger here, and how long after ``produce`` started its consumer binds:
#: well past the linger (the default 30 s behaves alike; a short one keeps the test short).
#: ``produce`` starts and sends its 2,000 messages in about 0.4 s, so 2 s of the delay are
#: its start on a loaded machine and the rest is past the linger
LINGER_S = 0.5
LATE_BIND_S = 2.5


def test_produce_started_before_its_peer_delivers_once_the_peer_binds_past_the_linger(free_port):
    """``produce`` started first queues what fits (``--hwm``) and finishes sending; its peer
    binds only after a delay longer than the linger. Every message arrives: the linger
    starts once a peer is there, not at the last send."""
    producer = subprocess.Popen(
        [CLI, "produce", f"tcp://127.0.0.1:{free_port}", "--no-progress", "--count", "2000", "--linger", str(LINGER_S)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            producer.wait(LATE_BIND_S)  # a deliberate delay: the query's start, not a synchronisation
        consumer = _consumer(f"@tcp://127.0.0.1:{free_port}", "--format", "json", "--count", "2000", "--timeout", "60")
        out, err = consumer.communicate(timeout=90)
        produced_out, produced_err = producer.communicate(timeout=60)
    finally:
        producer.kill()
    assert consumer.returncode == 0, err
    assert "received 2000 messages" in out
    assert producer.returncode == 0, produced_err
    assert "sent 2000 messages" in produced_out


def test_produce_with_no_peer_fails_saying_the_queued_messages_were_dropped(free_port):
    """Nobody ever connects: after ``--peer-wait`` the run exits 1 naming the endpoint and
    the dropped messages, instead of reporting them sent."""
    result = _cli(
        "produce", f"tcp://127.0.0.1:{free_port}", "--no-progress", "--count", "50", "--peer-wait", "1", timeout=30
    )
    assert result.returncode == 1, result.stdout
    assert "sent 50 messages" not in result.stdout
    assert f"no peer connected to tcp://127.0.0.1:{free_port}" in result.stderr
    assert "50 messages queued for one were dropped" in result.stderr
