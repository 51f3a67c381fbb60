"""``--metrics HOST:PORT``, the flag of every long-running service (``relay``, ``broker``):
where it serves its Prometheus metrics, and the check that refuses a bad one before any
socket is opened.

Why its own module: the relay's commands (``servers``) and the broker's (``broker``) are
modules of their own, and both take this flag.
"""

from __future__ import annotations

import typer

__all__ = ["metrics_option", "check_metrics"]


def metrics_option() -> str | None:
    """``--metrics HOST:PORT``: serve the service's Prometheus metrics there (off by default)."""
    return typer.Option(
        None,
        "--metrics",
        metavar="HOST:PORT",
        help="Serve Prometheus metrics at http://HOST:PORT/metrics (needs the extra: pip install "
        "'spark-zmq[metrics]'); off by default. See docs/metrics.md.",
    )


def check_metrics(metrics: str | None) -> None:
    """A bad ``--metrics`` is a usage error, and a missing prometheus-client one too (exit 2),
    before any socket is opened."""
    if metrics is None:
        return
    from ..metrics import MISSING, parse_address

    try:
        parse_address(metrics)
    except ValueError as exc:
        raise typer.BadParameter(str(exc).replace(f"--metrics {metrics!r}: ", ""), param_hint="'--metrics'") from None
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise typer.BadParameter(MISSING, param_hint="'--metrics'") from None
