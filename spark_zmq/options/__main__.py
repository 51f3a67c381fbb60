"""``python -m spark_zmq.options``: print or check the options docs (see ``docs.main``)."""

from .docs import main

raise SystemExit(main())
