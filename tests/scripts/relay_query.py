"""A Spark application reading relays into Parquet until it is killed (the relay tests
kill it with ``kill -9`` and start it again from the same checkpoint).

usage: relay_query.py RELAYS CHECKPOINT OUTPUT
"""

import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

from pyspark.sql import SparkSession  # noqa: E402

relays, checkpoint, output = sys.argv[1:4]
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.pyspark.python", sys.executable)
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
import spark_zmq  # noqa: E402

spark_zmq.register(spark)
query = (
    spark.readStream.format("zmq")
    .option("relays", relays)
    .option("startingOffsets", "earliest")
    .load()
    .selectExpr("partition", "offset", "cast(value as string) as value")
    .writeStream.format("parquet")
    .option("path", output)
    .option("checkpointLocation", checkpoint)
    .trigger(processingTime="200 milliseconds")
    .start()
)
print("started", flush=True)
query.awaitTermination()
