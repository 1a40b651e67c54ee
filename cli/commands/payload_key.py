"""`cloudburst payload-key create`: a new payload key, as a line of the keyring file that the
worker, the trigger, the CLI and the codec server read (`CLOUDBURST_PAYLOAD_KEYRING_FILE`,
worker/payload_codec.py). The Secret of the shipped manifests, from it (docs/security.md,
"Payload keys"):

    kubectl -n cloudburst-system create secret generic cloudburst-payload-keys \\
      --from-literal=keyring="$(cloudburst payload-key create)"
"""

from __future__ import annotations

from typing import Annotated

import typer

from cli.connect import fail
from worker.payload_codec import KeyringError, new_key_line

payload_key_app = typer.Typer(
    help="Payload keys: every payload of Temporal sealed with a key only our processes hold.",
    no_args_is_help=True,
)


@payload_key_app.command("create")
def create(
    key_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="the key's id, 1-64 of [A-Za-z0-9._-] (default: today's date and a random suffix)",
        ),
    ] = None,
) -> None:
    """Print a new random key as a keyring line, `<key-id> <32 bytes, base64>`. The first
    line of a keyring seals, every line opens: rotate by adding the new line last, rolling
    every process, then moving it first (docs/security.md, "Payload keys")."""
    try:
        line = new_key_line(key_id)
    except KeyringError as err:
        raise fail(f"--id: {err}") from None
    typer.echo(line)
