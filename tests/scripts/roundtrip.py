"""The source and the sink through a session whose driver never imports spark_zmq: Spark
discovers the data source itself (the installed ``pyspark_zmq`` module). SESSION is
``classic`` (``master("local[2]")``) or ``connect`` (``remote("local[2]")``: pyspark starts
a local Connect server and talks to it over gRPC, as a remote client would).

Prints ``sink N`` (messages a plain pyzmq PULL received from a batch write), ``source N``
(rows a Trigger.AvailableNow query read from a plain pyzmq PUSH) and ``imported False``
(whether the driver's Python imported spark_zmq).

usage: roundtrip.py SESSION SINK_PORT SOURCE_PORT WORKDIR
"""

import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

import zmq  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

mode, sink_port, source_port, work = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if mode == "connect":
    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
else:
    assert mode == "classic", f"SESSION is classic or connect, not {mode!r}"
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
context = zmq.Context.instance()
pull = context.socket(zmq.PULL)
pull.setsockopt(zmq.RCVTIMEO, 60_000)
pull.bind(f"tcp://127.0.0.1:{sink_port}")
(
    spark.range(1000)
    .selectExpr("cast(id as string) as value")
    .write.format("zmq")
    .mode("append")
    .option("endpoints", f"tcp://127.0.0.1:{sink_port}")
    .option("format", "text")
    .save()
)
print("sink", len({pull.recv() for _ in range(1000)}), flush=True)

push = context.socket(zmq.PUSH)
push.setsockopt(zmq.LINGER, 5000)
push.connect(f"tcp://127.0.0.1:{source_port}")
for i in range(500):
    push.send(b"m-%d" % i)
query = (
    spark.readStream.format("zmq")
    .option("endpoints", f"@tcp://127.0.0.1:{source_port}")
    .option("spoolDir", os.path.join(work, "spool"))
    .option("timeout", "2")
    .load()
    .selectExpr("cast(value as string) as v")
    .writeStream.format("memory")
    .queryName("roundtrip_source")
    .option("checkpointLocation", os.path.join(work, "ckpt"))
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination(180)
assert query.exception() is None, query.exception()
print("source", spark.table("roundtrip_source").distinct().count(), flush=True)
print("imported", "spark_zmq" in sys.modules, flush=True)
spark.stop()
