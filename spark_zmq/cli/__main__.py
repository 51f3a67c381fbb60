"""``python -m spark_zmq.cli``: the ``spark-zmq`` command."""

import sys

from . import main

main()
sys.exit()
