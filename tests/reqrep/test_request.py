"""``spark_zmq.request``: calling ZeroMQ services from Spark, through Spark, on real sockets.

Workers are plain pyzmq REP or ROUTER sockets in their own processes
(tests/scripts/rep_worker.py, no spark_zmq code): every input row must get exactly one
reply row, in input order, whatever the workers do (die holding a request, answer every
other request, answer with garbage or for requests never sent).
"""

from __future__ import annotations

import signal
import time

import pytest
from pyspark.sql import functions as F
from servicetest import ServiceWorker, collect_in_thread

import spark_zmq
from spark_zmq.options import OptionError

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

ANY_PORT = "tcp://127.0.0.1:*"
ARROW_REPLY = "doubled long, worker string"


def numbers(spark, n: int, partitions: int = 2):
    return spark.range(0, n, numPartitions=partitions).selectExpr("id as x", "cast(id as string) as value")


def assert_doubled(rows, n: int) -> None:
    """One row per input row, in input order, each with its own reply."""
    assert [r.x for r in rows] == list(range(n))
    assert all(r.doubled == 2 * r.x for r in rows), [r for r in rows if r.doubled != 2 * r.x][:3]


@pytest.mark.parametrize("fmt", ["arrow", "json", "raw", "text"])
def test_every_format_through_a_plain_rep_worker(spark, fmt):
    n = 1200
    with ServiceWorker.start("--format", fmt, "--bind", ANY_PORT, "--name", "rep") as worker:
        if fmt in ("arrow", "json"):
            out = spark_zmq.request(
                numbers(spark, n),
                worker.endpoint,
                reply_schema=ARROW_REPLY,
                format=fmt,
                batch_rows=50,
                max_in_flight=3,
                timeout="20s",
            )
            rows = out.collect()
            assert out.columns == ["x", "value", "doubled", "worker"]
            assert_doubled(rows, n)
            assert {r.worker for r in rows} == {"rep"}
        else:
            out = spark_zmq.request(numbers(spark, n), worker.endpoint, format=fmt, maxInFlight=8)
            rows = out.collect()
            assert out.columns == ["x", "value", "reply"]
            expected = [f"rep:{i}" for i in range(n)]
            got = [r.reply.decode() if fmt == "raw" else r.reply for r in rows]
            assert [r.x for r in rows] == list(range(n)) and got == expected
        assert worker.served() == (n if fmt != "arrow" else n // 50)


def test_a_worker_killed_holding_a_request_costs_one_timeout_not_the_rows(spark):
    n = 2000
    with (
        ServiceWorker.start("--format", "arrow", "--bind", ANY_PORT, "--hold-after", "5", "--name", "dies") as dies,
        ServiceWorker.start("--format", "arrow", "--bind", ANY_PORT, "--name", "lives") as lives,
    ):
        out = spark_zmq.request(
            numbers(spark, n, 1),
            [dies.endpoint, lives.endpoint],
            reply_schema=ARROW_REPLY,
            batch_rows=20,
            max_in_flight=4,
            timeout=3,
            retries=2,
        )
        thread, result = collect_in_thread(out)
        dies.wait_for("HOLDING")
        dies.kill(signal.SIGKILL)
        thread.join(120)
        assert not thread.is_alive() and "error" not in result, result.get("error")
        rows = result["rows"]
        assert_doubled(rows, n)
        assert {r.worker for r in rows} == {"dies", "lives"}
        assert dies.served() == 5


def test_a_worker_answering_every_other_request_loses_nothing(spark):
    n = 600
    with (
        ServiceWorker.start(
            "--format", "json", "--bind", ANY_PORT, "--router", "--every-other", "--name", "half"
        ) as half,
        ServiceWorker.start("--format", "json", "--bind", ANY_PORT, "--name", "whole") as whole,
    ):
        out = spark_zmq.request(
            numbers(spark, n),
            [half.endpoint, whole.endpoint],
            reply_schema=ARROW_REPLY,
            format="json",
            max_in_flight=4,
            timeout="1s",
            retries=4,
        )
        rows = out.collect()
        assert_doubled(rows, n)
        assert half.served() > 0


def test_stray_replies_are_dropped_and_the_real_ones_kept(spark):
    n = 300
    with ServiceWorker.start(
        "--format", "text", "--bind", ANY_PORT, "--router", "--reply", "unknown-id", "--name", "noisy"
    ) as worker:
        rows = spark_zmq.request(numbers(spark, n), worker.endpoint, format="text", timeout=20).collect()
        assert [r.reply for r in rows] == [f"noisy:{i}" for i in range(n)]


def test_an_unreachable_service_fails_the_task_within_timeout_times_attempts(spark, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    out = spark_zmq.request(numbers(spark, 10, 1), endpoint, format="text", timeout=1, retries=1)
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        out.collect()
    elapsed = time.monotonic() - started
    text = str(info.value)
    assert endpoint in text and "timeout 1 s" in text and "retries 1" in text, text
    assert elapsed < 2 + 20, elapsed  # 2 s of waiting, and Spark's own start and failure


@pytest.mark.parametrize(
    "hostile, fmt",
    [("garbage", "arrow"), ("billion", "arrow"), ("rows+1", "arrow"), ("garbage", "json"), ("garbage", "text")],
)
def test_hostile_replies_fail_fast_or_become_nulls(spark, hostile, fmt):
    n = 40
    schema = ARROW_REPLY if fmt != "text" else None
    with ServiceWorker.start("--format", fmt, "--bind", ANY_PORT, "--reply", hostile) as worker:
        strict = spark_zmq.request(
            numbers(spark, n, 1), worker.endpoint, reply_schema=schema, format=fmt, batch_rows=10, timeout=20
        )
        with pytest.raises(Exception) as info:
            strict.collect()
        if fmt != "json":  # Spark's from_json words json's failure itself
            assert "does not fit" in str(info.value) and "row" in str(info.value), str(info.value)[:2000]
        corrupt = "why"
        reply = (schema + f", {corrupt} string") if schema else f"reply string, {corrupt} string"
        lenient = spark_zmq.request(
            numbers(spark, n, 1),
            worker.endpoint,
            reply_schema=reply,
            format=fmt,
            batch_rows=10,
            timeout=20,
            mode="PERMISSIVE",
            column_name_of_corrupt_record=corrupt,
        )
        rows = lenient.collect()
    assert [r.x for r in rows] == list(range(n))
    value = "doubled" if fmt != "text" else "reply"
    assert all(getattr(r, value) is None for r in rows)
    assert all(r.why for r in rows), rows[:2]


def test_curve_end_to_end_and_a_client_without_the_key_gets_nothing(spark, tmp_path):
    import zmq.auth

    keys, clients = tmp_path / "keys", tmp_path / "authorized"
    keys.mkdir()
    clients.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(str(keys), "server")
    client_public, client_secret = zmq.auth.create_certificates(str(keys), "client")
    (clients / "client.key").write_bytes(open(client_public, "rb").read())
    with ServiceWorker.start(
        "--format",
        "text",
        "--bind",
        ANY_PORT,
        "--curve-secret-file",
        server_secret,
        "--authorized",
        str(clients),
        "--name",
        "secure",
    ) as worker:
        rows = spark_zmq.request(
            numbers(spark, 50, 1),
            worker.endpoint,
            format="text",
            curve_certificate=client_secret,
            curve_server_key=server_public,
        ).collect()
        assert [r.reply for r in rows] == [f"secure:{i}" for i in range(50)]
        stranger_public, stranger_secret = zmq.auth.create_certificates(str(keys), "stranger")
        refused = spark_zmq.request(
            numbers(spark, 5, 1),
            worker.endpoint,
            format="text",
            timeout=1,
            retries=0,
            curve_certificate=stranger_secret,
            curve_server_key=server_public,
        )
        with pytest.raises(Exception, match="took request|no reply"):
            refused.collect()
        plain = spark_zmq.request(numbers(spark, 5, 1), worker.endpoint, format="text", timeout=1, retries=0)
        with pytest.raises(Exception, match="took request|no reply"):
            plain.collect()
        assert worker.served() == 50


def test_a_streaming_query_restarted_mid_call_writes_each_row_once(spark, tmp_path):
    source, output, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt"
    source.mkdir()
    for part in range(4):
        spark.range(part * 100, (part + 1) * 100, numPartitions=1).selectExpr("id as x").write.mode(
            "overwrite"
        ).parquet(str(source / f"part={part}"))
        # the file source reads files, not directories: move the parquet files up
        for f in (source / f"part={part}").glob("*.parquet"):
            f.rename(source / f"{part}-{f.name}")

    def query(endpoint: str):
        stream = spark.readStream.schema("x long").option("maxFilesPerTrigger", 1).parquet(str(source))
        called = spark_zmq.request(stream, endpoint, reply_schema=ARROW_REPLY, batch_rows=25, timeout=2, retries=1)
        return (
            called.writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    with ServiceWorker.start("--format", "arrow", "--bind", ANY_PORT, "--hold-after", "6") as stalls:
        first = query(stalls.endpoint)
        stalls.wait_for("HOLDING")  # the second micro-batch is waiting for a reply
        first.stop()
    with ServiceWorker.start("--format", "arrow", "--bind", ANY_PORT) as worker:
        second = query(worker.endpoint)
        assert second.awaitTermination(120)
        assert second.exception() is None
    rows = spark.read.parquet(str(output)).orderBy("x").collect()
    assert [r.x for r in rows] == list(range(400))
    assert all(r.doubled == 2 * r.x for r in rows)


def test_bad_calls_fail_when_made_naming_what_is_wrong(spark):
    df = numbers(spark, 3)
    cases = [
        (dict(format="arrow"), "reply_schema"),
        (dict(format="arrow", reply_schema="x long"), "clash"),
        (dict(format="text", reply_schema="reply long"), "one string column"),
        (dict(format="raw", batch_rows=0), "batchRows"),
        (dict(format="raw", timeout="5 fortnights"), "timeout"),
        (dict(format="raw", max_in_flight="many"), "maxInFlight"),
        (dict(format="raw", mode="DROPMALFORMED"), "mode"),
        (dict(format="raw", column_name_of_corrupt_record="why"), "PERMISSIVE"),
        (dict(format="raw", nonsense=1), "unknown request option"),
        (dict(format="json", reply_schema="a long, A string"), "twice"),
    ]
    for kwargs, words in cases:
        with pytest.raises(OptionError, match=words):
            spark_zmq.request(df, "tcp://127.0.0.1:5555", **kwargs)
    with pytest.raises(OptionError, match="'value' column"):
        spark_zmq.request(df.drop("value"), "tcp://127.0.0.1:5555", format="text")
    with pytest.raises(OptionError, match="endpoints"):
        spark_zmq.request(df, "", format="text")
    binary = df.select(F.col("value").cast("binary").alias("value"))
    assert spark_zmq.request(binary, "tcp://127.0.0.1:5555", format="raw").columns == ["value", "reply"]
