"""`cloudburst bootstrap render`: the first-boot script a VM would get, offline.

It renders through the same function as the `prepare_bootstrap` activity, with the secrets
(join token, Tailscale auth key) replaced by clearly marked placeholders, so an operator can
read exactly what their VMs will run without a cluster and without seeing a secret.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from activities.bootstrap import ca_cert_hash, render_claim_script
from api import NodeClass, NodePool, Offering
from cli.manifests import load_manifests
from cli.manual_claims import ClaimError, PoolContext, check_offering, parse_offering
from cluster.tenancy import Tenancy

bootstrap_app = typer.Typer(help="Inspect the first-boot script burst VMs run.")

TOKEN_PLACEHOLDER = "<BOOTSTRAP-TOKEN: created per claim at launch>"
CA_HASH_PLACEHOLDER = (
    "<CA-CERT-HASH: sha256 of the cluster CA public key, read from kube-public/cluster-info "
    "at launch; pass --ca-cert to fill it in>"
)

_Model = TypeVar("_Model", NodePool, NodeClass)


class RenderError(Exception):
    """A manifest or option that cannot be rendered: the message says what to fix."""


def tailscale_placeholder(node_class: NodeClass) -> str | None:
    """What stands for the auth key: which Secret and key the activity would read."""
    settings = node_class.spec.tailscale
    if settings is None:
        return None
    namespace = node_class.metadata.namespace or "default"
    if settings.oauth_client_secret_ref is not None:
        client = settings.oauth_client_secret_ref
        return (
            f"<TAILSCALE-AUTH-KEY minted for this node by the OAuth client in Secret "
            f"{namespace}/{client.name}>"
        )
    ref = settings.auth_key_secret_ref
    assert ref is not None
    return f"<TAILSCALE-AUTH-KEY from Secret {namespace}/{ref.name} key {ref.key}>"


def render_preview(
    pool: NodePool,
    node_class: NodeClass,
    *,
    claim_name: str | None = None,
    offering: Offering | None = None,
    ca_cert_pem: bytes | None = None,
    tenancy: Tenancy | None = None,
) -> str:
    """The script for a claim of `pool`, secrets replaced by placeholders; `tenancy`: the
    operator's (which namespace holds shared pools), the default install's when None."""
    namespace = pool.metadata.namespace or "default"
    pool_name = pool.metadata.name
    name = claim_name or f"{pool_name}-xxxxx"
    node_spec = (tenancy or Tenancy()).node_spec(namespace, pool.spec)
    if offering is not None:
        context = PoolContext(pool, node_class.metadata.name, node_class, node_spec)
        try:
            check_offering(context, offering)
        except ClaimError as err:
            raise RenderError(str(err)) from None
    ca_hash = CA_HASH_PLACEHOLDER
    if ca_cert_pem is not None:
        try:
            ca_hash = ca_cert_hash(ca_cert_pem)
        except ValueError as err:
            raise RenderError(f"--ca-cert is not a PEM certificate: {err}") from None
    try:
        return render_claim_script(
            claim_name=name,
            namespace=namespace,
            node_pool=pool_name,
            node_class=node_class.spec,
            node_labels=dict(node_spec.template.labels),
            taints=list(node_spec.template.taints),
            offering=offering,
            token=TOKEN_PLACEHOLDER,
            ca_hash=ca_hash,
            tailscale_auth_key=tailscale_placeholder(node_class),
        )
    except ApplicationError as err:
        raise RenderError(err.message) from None


def _load(paths: list[Path]) -> dict[Path, list[BaseModel]]:
    """The Cloudburst objects of each file, each read once (`-`: standard input)."""
    found: dict[Path, list[BaseModel]] = {}
    for path in dict.fromkeys(paths):
        loaded = load_manifests(path)
        if loaded.problems:
            raise RenderError("\n".join(str(problem) for problem in loaded.problems))
        found[path] = loaded.resources
    return found


def _of_kind(resources: list[BaseModel], kind: type[_Model]) -> list[_Model]:
    return [r for r in resources if isinstance(r, kind)]


def _pick_pool(where: str, resources: list[BaseModel]) -> NodePool:
    pools = _of_kind(resources, NodePool)
    if len(pools) != 1:
        names = ", ".join(p.metadata.name for p in pools) or "none"
        raise RenderError(f"{where}: expected one NodePool, found {len(pools)} ({names})")
    return pools[0]


def _pick_class(where: str, resources: list[BaseModel], pool: NodePool) -> NodeClass:
    classes = _of_kind(resources, NodeClass)
    wanted = pool.spec.node_class_ref
    if wanted is not None:
        for node_class in classes:
            if node_class.metadata.name == wanted:
                return node_class
        raise RenderError(
            f"{where}: no NodeClass {wanted!r} (NodePool {pool.metadata.name} spec.nodeClassRef)"
        )
    if len(classes) != 1:
        names = ", ".join(c.metadata.name for c in classes) or "none"
        raise RenderError(
            f"{where}: expected one NodeClass, found {len(classes)} ({names}); "
            "set spec.nodeClassRef on the NodePool"
        )
    return classes[0]


@bootstrap_app.command("render")
def render(
    files: Annotated[
        list[Path] | None,
        typer.Option(
            "--filename",
            "-f",
            help="YAML with the NodePool and its NodeClass (`-`: standard input); or "
            "--nodepool and --nodeclass",
        ),
    ] = None,
    nodeclass: Annotated[
        Path | None, typer.Option("--nodeclass", help="YAML file with the NodeClass")
    ] = None,
    nodepool: Annotated[
        Path | None, typer.Option("--nodepool", help="YAML file with the NodePool")
    ] = None,
    claim: Annotated[
        str | None, typer.Option("--claim", help="claim (= node, VM) name; default <pool>-xxxxx")
    ] = None,
    offering: Annotated[
        str | None,
        typer.Option("--offering", help="PROVIDER/REGION/INSTANCE-TYPE, for the node's labels"),
    ] = None,
    ca_cert: Annotated[
        Path | None,
        typer.Option("--ca-cert", help="the cluster CA (PEM), to fill in the discovery hash"),
    ] = None,
) -> None:
    """Print the first-boot script a VM of the pool would get; no cluster needed.

    The join token and the Tailscale auth key are replaced by marked placeholders (each VM
    gets a token of its own at launch); so is the CA hash unless --ca-cert is given.
    """
    try:
        pool_files = [*(files or []), *([nodepool] if nodepool else [])]
        class_files = [*(files or []), *([nodeclass] if nodeclass else [])]
        if not pool_files or not class_files:
            raise RenderError(
                "give -f FILE (the NodePool and its NodeClass), or --nodepool and --nodeclass"
            )
        loaded = _load([*pool_files, *class_files])
        pool = _pick_pool(
            _named(pool_files), [r for p in dict.fromkeys(pool_files) for r in loaded[p]]
        )
        node_class = _pick_class(
            _named(class_files), [r for p in dict.fromkeys(class_files) for r in loaded[p]], pool
        )
        chosen = parse_offering(offering) if offering else None
        pem = _read(ca_cert) if ca_cert is not None else None
        script = render_preview(
            pool, node_class, claim_name=claim, offering=chosen, ca_cert_pem=pem
        )
    except (RenderError, ClaimError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(code=1) from None
    sys.stdout.write(script)


def _named(paths: list[Path]) -> str:
    return ", ".join(str(path) for path in dict.fromkeys(paths))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise RenderError(f"cannot read {path}: {err.strerror}") from None
