"""The source and the sink through a Spark Connect session (``remote("local[2]")``: pyspark
starts a local Connect server and talks to it over gRPC, as a remote client would).

Prints ``sink N`` (messages a plain pyzmq PULL received from a batch write) and ``source N``
(rows a Trigger.AvailableNow query read from a plain pyzmq PUSH).

usage: connect_roundtrip.py SINK_PORT SOURCE_PORT WORKDIR
"""

import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

import zmq  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

sink_port, source_port, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
spark = SparkSession.builder.remote("local[2]").getOrCreate()
assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
# no import spark_zmq, no register: the server's Spark discovers the installed connector
context = zmq.Context.instance()
pull = context.socket(zmq.PULL)
pull.setsockopt(zmq.RCVTIMEO, 60_000)
pull.bind(f"tcp://127.0.0.1:{sink_port}")
(spark.range(1000).selectExpr("cast(id as string) as value").write.format("zmq").mode("append")
 .option("endpoints", f"tcp://127.0.0.1:{sink_port}").option("format", "text").save())
print("sink", len({pull.recv() for _ in range(1000)}), flush=True)

push = context.socket(zmq.PUSH)
push.setsockopt(zmq.LINGER, 5000)
push.connect(f"tcp://127.0.0.1:{source_port}")
for i in range(500):
    push.send(b"m-%d" % i)
query = (spark.readStream.format("zmq").option("endpoints", f"@tcp://127.0.0.1:{source_port}")
         .option("spoolDir", os.path.join(work, "spool")).option("timeout", "2").load()
         .selectExpr("cast(value as string) as v").writeStream.format("memory").queryName("connect_source")
         .option("checkpointLocation", os.path.join(work, "ckpt")).trigger(availableNow=True).start())
query.awaitTermination(180)
assert query.exception() is None, query.exception()
print("source", spark.table("connect_source").distinct().count(), flush=True)
spark.stop()
