"""A batch write with pattern pub to a subscriber slower than the writer: prints what the
subscriber received; the sink's driver-side commit logs how many messages pub dropped
(on stderr). The test checks that received + dropped = rows written.

With FORMAT ``arrow`` (one row per message), it also prints the ``spark_zmq.sequence``
numbers of what arrived: unique, and the gaps are the drops.

usage: pub_drops.py PORT ROWS [FORMAT]
"""

import os
import sys
import threading
import time

os.environ["PYSPARK_PYTHON"] = sys.executable

from pyspark.sql import SparkSession  # noqa: E402

from spark_zmq.patterns import Sub  # noqa: E402

port, rows = int(sys.argv[1]), int(sys.argv[2])
fmt = sys.argv[3] if len(sys.argv) > 3 else "text"
sequences = []
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.pyspark.python", sys.executable)
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
import spark_zmq  # noqa: E402

spark_zmq.register(spark)
# The subscriber's own queue must never be what fills: a SUB at its high-water mark drops
# what arrives (by specification, and where the sink cannot count it). Slowness reaches the
# writer through TCP instead (a 4 KiB receive buffer), whose XPUB counts each drop.
subscriber = Sub(f"@tcp://127.0.0.1:{port}", topics=[""], hwm=rows + 1, rcvbuf=4096)
received = 0
written = threading.Event()


def read_slowly() -> None:
    """Read until the write has returned and then nothing came for 10 s: what the closed
    write task's socket still had in flight (its linger is sendTimeoutMs) comes through
    first, however slowly a loaded machine runs this reader."""
    global received
    quiet_since_written = 0
    while True:
        try:
            message = subscriber.recv(timeout=2.0)
        except TimeoutError:
            if written.is_set():
                quiet_since_written += 1
                if quiet_since_written >= 5:
                    return
            continue
        quiet_since_written = 0
        received += 1
        if fmt == "arrow":
            import pyarrow as pa

            metadata = pa.ipc.open_stream(message).schema.metadata
            sequences.append(int(metadata[b"spark_zmq.sequence"]))
        time.sleep(0.0002)  # a slow subscriber: shapes the load, not synchronisation


reader = threading.Thread(target=read_slowly)
reader.start()
(
    spark.range(rows, numPartitions=1)
    .selectExpr("concat(CAST(id AS STRING), repeat('x', 2000)) AS value")
    .write.format("zmq")
    .mode("append")
    .option("pattern", "pub")
    .option("topic", "t")
    .option("format", fmt)
    .option("rowsPerMessage", "1")
    .option("hwm", "100")
    .option("endpoints", f"tcp://127.0.0.1:{port}")
    .save()
)
written.set()
reader.join(120)
print(f"RESULT received {received}", flush=True)
if fmt == "arrow":
    print(f"RESULT sequences {len(sequences)} unique {len(set(sequences))} max {max(sequences)}", flush=True)
subscriber.close()
spark.stop()
