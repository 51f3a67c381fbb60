"""``spark-zmq keygen``: make a CURVE key pair for the ``--curve-*`` flags and options."""

from __future__ import annotations

import os

import typer

from ..patterns.curve_keys import keygen as write_key_pair
from ..patterns.curve_keys import load_public_key
from .console import print_error

__all__ = ["keygen_command"]


def keygen_command(
    name: str = typer.Argument(..., help="Name of the pair: writes NAME.key (public) and NAME.key_secret."),
    dir: str = typer.Option(".", "--dir", "-d", help="Directory to write them to (created if missing)."),
) -> None:
    """Make a CURVE key pair: NAME.key (public: give it to the peers) and NAME.key_secret
    (mode 0600: this side's --curve-certificate / curveCertificate); prints the public key."""
    try:
        public_file, secret_file = write_key_pair(os.path.expanduser(dir), name)
        public = load_public_key(public_file, None).decode()
    except (OSError, ValueError) as exc:  # an existing pair, a bad name, an unwritable directory
        print_error(str(exc))
        raise typer.Exit(1) from None
    typer.echo(f"public key: {public}")
    typer.echo(
        f"public certificate: {public_file}  (a server's --curve-server-key, or a client's entry in "
        "the server's authorized keys directory)"
    )
    typer.echo(f"secret certificate: {secret_file}  (this side's --curve-certificate; keep it private)")
