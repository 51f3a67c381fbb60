"""The default spool directory (the ``spoolDir`` option's default).

Why apart: it is derived from the stream's options and the user's state directory, so a
restarted query finds its spool; that is path logic, not a row of the table.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

from ..patterns.endpoints import Endpoint
from .spec import OptionError

__all__ = ["default_spool_dir"]


def default_spool_dir(pattern: str, endpoints: Sequence[Endpoint], fmt: str, topics: Sequence[str]) -> str:
    """A spool directory derived from what identifies the stream, so a restarted query
    with the same options finds the spool it left behind.

    It lives under the user's state directory (``$XDG_STATE_HOME``, else
    ``~/.local/state``): it must survive a reboot (the spool holds messages Spark has not
    committed yet, so not under a temporary directory the system clears) and belong to
    the user running the query.
    """
    key = "|".join([pattern, ",".join(map(str, endpoints)), fmt, ",".join(topics)])
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):  # unset, empty or relative: the XDG spec says ignore it
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    if not os.path.isabs(state):
        raise OptionError(
            "option 'spoolDir' is not set and this user has no home directory for the default "
            "spool directory; give an absolute path",
            "spoolDir",
        )
    return os.path.join(state, "spark-zmq", "spool", digest)
