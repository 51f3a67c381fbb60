"""A query's receiver process (option ``receivers=processes``): a relay for one channel.

Started by ``processes`` with ``python -m spark_zmq.relay.child``; its
configuration comes on stdin (a pickled ``SourceOptions`` for its one endpoint, and the
key pairs of its listening port), never on the command line, where other users could
read the keys. The parent keeps stdin open for as long as it lives, so its end (even by
``kill -9``) reaches the child as end of file at once. It prints the relay's ``ready`` line
once its socket is bound, starts receiving when the query has checked its checkpoint (the
``start`` request), and serves until its parent, the query's reader process, stops it or
dies.
"""

from __future__ import annotations

import pickle
import sys

from ..ingest.config import IngestConfig
from ..patterns.curve import Curve
from ..patterns.curve_keys import KeyPair
from .run import serve


def main() -> int:
    config = pickle.load(sys.stdin.buffer)  # stdin stays open: its end of file is the parent's end
    listen_curve = Curve.server(KeyPair(*config["server_keys"]), frozenset({config["client_public"]}))
    try:
        return serve(IngestConfig.from_options(config["options"]), config["listen"], listen_curve, parent_pid=config["parent"],
                     start_receivers=False, linger_s=config.get("linger_s", 0.0), parent_pipe=sys.stdin.buffer)
    except Exception as exc:  # a bind error, a locked spool: the reason, for the parent to report  # noqa: BLE001
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
