"""Run a streaming read in Spark local-cluster mode: executors are separate JVMs with their
own Python workers, so nothing can pass through the driver's memory. Prints a JSON result.

usage: cluster_stream.py ENDPOINT SPOOL_DIR CHECKPOINT COUNT
"""

import json
import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

import zmq  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

endpoint, spool_dir, checkpoint, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
spark = (
    SparkSession.builder.master("local-cluster[2,1,1024]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.pyspark.python", sys.executable)
    .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
import spark_zmq  # noqa: E402

spark_zmq.register(spark)

push = zmq.Context.instance().socket(zmq.PUSH)
push.setsockopt(zmq.LINGER, 5000)
push.setsockopt(zmq.SNDHWM, count + 1)  # queue everything until the query binds
push.connect(endpoint)
for i in range(count):
    push.send(b"c-%d" % i)

df = (
    spark.readStream.format("zmq")
    .option("endpoints", "@" + endpoint)
    .option("spoolDir", spool_dir)
    .option("minPartitions", "4")
    .option("timeout", "2")
    .load()
)
query = (
    df.selectExpr("offset", "cast(value as string) value", "spark_partition_id() as task")
    .writeStream.format("memory")
    .queryName("cluster")
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination(240)
row = spark.sql(
    "select count(*), count(distinct offset), count(distinct value), count(distinct task) from cluster"
).first()
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
print(
    "RESULT "
    + json.dumps(
        {
            "rows": row[0],
            "offsets": row[1],
            "values": row[2],
            "tasks": row[3],
            "executors": executors,
            "exception": str(query.exception()) if query.exception() else None,
        }
    )
)
spark.stop()
push.close()
