"""`cloudburst catalog`: show the offerings a pool would get (with each price's source and
date), refresh prices from the providers' APIs, and show the scheduled refreshes' status.

`catalog refresh` reads each provider's price API (all seven; see
`activities/prices/refresh.py`) with the credentials named in `REQUIRED_CREDENTIALS`, taken
from the environment.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from rich.text import Text
from urllib3.exceptions import HTTPError

from activities.planning.config import REAL_PROVIDERS
from activities.prices.price_store import live_catalog, read_store, statuses
from activities.prices.refresh import REQUIRED_CREDENTIALS, RefreshError, refresh_provider
from api._base import CamelModel
from api.nodeclaim import Offering
from api.nodepool import PROVIDERS, Requirements
from api.prices import CATALOG_CONFIGMAP, ProviderPriceStatus
from cli.connect import Kubeconfig, KubeContext, cli_settings, err_console, fail
from cli.output import (
    Output,
    OutputFormat,
    age,
    is_tty,
    items,
    new_table,
    print_data,
    print_table,
    stdout_console,
)
from planner.catalog import CATALOG_ENV, SHIPPED_PATH, Catalog
from planner.node_size import kube_reserved, usable_capacity
from worker.kube_client import kube_api_client

catalog_app = typer.Typer(help="The built-in instance-type catalog and its prices.")


class RankedOffering(CamelModel):
    """One line of `catalog show`: the offering (price, shape, zone) and what is left of the
    node for pods once kube-reserved is set aside."""

    rank: int
    offering: Offering
    usable_cpu: float
    usable_memory_gib: float


CatalogPath = Annotated[
    Path | None,
    typer.Option("--catalog", help=f"catalog file (default: ${CATALOG_ENV} or the shipped one)"),
]


@catalog_app.command("show")
def show(
    min_vcpu: Annotated[float, typer.Option(help="at least this many vCPUs per node")] = 1,
    min_ram_gb: Annotated[float, typer.Option(help="at least this many GiB per node")] = 1,
    arch: Annotated[list[str] | None, typer.Option(help="x86_64/arm64; repeat for several")] = None,
    region_constraint: Annotated[
        str, typer.Option(help="ANY, EU, US, or comma-separated region slugs")
    ] = "ANY",
    max_price: Annotated[float | None, typer.Option(help="EUR per hour")] = None,
    providers: Annotated[str | None, typer.Option(help="comma-separated allowed providers")] = None,
    limit: Annotated[int, typer.Option(help="rows to print")] = 20,
    catalog: CatalogPath = None,
    live: Annotated[
        bool,
        typer.Option(
            "--live", help="with the prices the worker's scheduled refresh keeps in the cluster"
        ),
    ] = False,
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Print the ranking a pool with these requirements would get (cheapest first), with
    each price's date (AS OF).

    --live lays the cluster's refreshed prices (ConfigMap cloudburst-catalog) over the file,
    as the planner does.
    -o wide adds each offering's ZONE and price SOURCE.
    -o json|yaml prints an object with "items", each with its rank, the offering (provider,
    region, instanceType, zone, vcpu, memoryGib, arch, priceEurPerHour, priceSource,
    priceAsOf), usableCpu and usableMemoryGib."""
    constraint: str | list[str] = (
        region_constraint
        if region_constraint.upper() in ("ANY", "EU", "US")
        else [r.strip() for r in region_constraint.split(",") if r.strip()]
    )
    try:
        requirements = Requirements(
            region_constraint=constraint,
            arch=arch or ["x86_64"],
            max_price_eur_per_hour=max_price,
            allowed_providers=[p.strip() for p in providers.split(",")] if providers else [],
        )
    except ValueError as err:
        err_console.print(Text.assemble(("✗", "red"), f" {err}"))
        raise typer.Exit(2) from None
    # Sizes as the seed's CloudBroker reads them: the node's vCPUs and memory, not what is
    # left after kube-reserved (the USABLE columns show that).
    class_providers = [p for p in PROVIDERS if p != "fake"]
    offerings = Catalog.load(catalog)
    if live:
        offerings = live_catalog(offerings, _read_cluster_store(kubeconfig, context))
    ranked = [
        o
        for o in offerings.offerings(requirements, class_providers)
        if (o.vcpu or 0) >= min_vcpu and (o.memory_gib or 0) >= min_ram_gb
    ][:limit]
    rows = []
    for rank, o in enumerate(ranked, 1):
        cap = usable_capacity(o, kube_reserved(o))
        rows.append(
            RankedOffering(
                rank=rank,
                offering=o,
                usable_cpu=round(cap.cpu_m / 1000, 3),
                usable_memory_gib=round(cap.memory_bytes / 2**30, 3),
            )
        )
    if output.is_data:
        print_data(items(rows), output)
    else:
        print_offerings(rows, f"≥{min_vcpu:g} vCPU and ≥{min_ram_gb:g} GiB", output)
    if not ranked:
        # Said on stderr too, where a script's reader looks when stdout has only a header.
        err_console.print(f"0 offerings with ≥{min_vcpu:g} vCPU and ≥{min_ram_gb:g} GiB")
        raise typer.Exit(1)


@catalog_app.command("refresh")
def refresh(
    provider: Annotated[str, typer.Option(help="one of " + ", ".join(REAL_PROVIDERS))],
    endpoint: Annotated[
        str | None,
        typer.Option(help="the price API's base URL, for all its calls (a local stand-in)"),
    ] = None,
    catalog: CatalogPath = None,
    output: Annotated[
        Path | None, typer.Option(help="where to write (default: the input file)")
    ] = None,
) -> None:
    """Rebuild one provider's part of the catalog file from its own price API.

    Credentials come from the environment: HCLOUD_TOKEN (hetzner), SCW_SECRET_KEY
    (scaleway), DIGITALOCEAN_TOKEN (digitalocean), AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY (aws: pricing:GetProducts, ec2:DescribeSpotPriceHistory),
    GOOGLE_API_KEY (gcp: Cloud Billing Catalog API); azure and ovh need none. In a cluster
    the worker does this on a Schedule, with an operator's Secret (see `catalog status`)."""
    source = catalog or Path(os.environ.get(CATALOG_ENV) or SHIPPED_PATH)
    current = Catalog.load(source)
    names = REQUIRED_CREDENTIALS.get(provider, ())
    credentials = {name: os.environ[name] for name in names if os.environ.get(name)}
    try:
        updated = refresh_provider(current, provider, endpoint=endpoint, credentials=credentials)
    except RefreshError as err:
        err_console.print(Text.assemble(("✗", "red"), f" {err}"))
        raise typer.Exit(1) from None
    target = output or source
    updated.save(target)
    before = sum(1 for e in current.entries if e.provider == provider)
    after = sum(1 for e in updated.entries if e.provider == provider)
    stdout_console().print(f"{provider}: {before} → {after} instance types written to {target}")


@catalog_app.command("status")
def status(
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Each provider's last scheduled price refresh: outcome, when the prices in use were
    fetched (AGE), how many instance types, and the error of the last attempt.

    A provider never refreshed is planned with the shipped catalog's prices. Exit 1 when
    the last attempt of any provider failed.
    -o json|yaml prints an object with "items" (provider, outcome, attemptedAt, refreshedAt,
    instanceTypes, source, error)."""
    rows = statuses(_read_cluster_store(kubeconfig, context))
    if output.is_data:
        print_data(items(rows), output)
    elif rows:  # as kubectl: no header over nothing, the reason on stderr
        print_statuses(rows, output)
    if not rows:
        err_console.print(
            f"no refresh recorded yet (ConfigMap {CATALOG_CONFIGMAP}): the shipped prices are used"
        )
    if any(r.outcome == "failed" for r in rows):
        raise typer.Exit(1)


def _read_cluster_store(kubeconfig: Path | None, context: str | None) -> dict[str, str]:
    settings = cli_settings(kubeconfig=kubeconfig, context=context)
    try:
        api_client = kube_api_client(settings)
    except Exception as err:  # the kubeconfig loaders raise several unrelated types
        raise fail(f"no Kubernetes configuration: {err}") from None
    with api_client:
        try:
            return read_store(k8s.CoreV1Api(api_client), settings.worker_namespace)
        except (ApiException, HTTPError) as err:
            reason = getattr(err, "reason", None) or err
            raise fail(
                f"cannot read ConfigMap {settings.worker_namespace}/{CATALOG_CONFIGMAP}: {reason}"
            ) from None


def print_statuses(rows: list[ProviderPriceStatus], output: OutputFormat) -> None:
    wide = output == OutputFormat.WIDE
    now = datetime.now(UTC)
    columns = ["PROVIDER", "OUTCOME", "AGE", "TYPES", "LAST ATTEMPT", "ERROR"]
    table = new_table(*columns, *(["SOURCE"] if wide else []))
    for row in rows:
        table.add_row(
            row.provider,
            row.outcome,
            age(now - row.refreshed_at) if row.refreshed_at else "never",
            str(row.instance_types),
            f"{age(now - row.attempted_at)} ago",
            row.error or "—",
            *([row.source or "—"] if wide else []),
        )
    print_table(table)


def print_offerings(rows: list[RankedOffering], sizes: str, output: OutputFormat) -> None:
    wide = output == OutputFormat.WIDE
    columns = ["#", "PROVIDER", "REGION", "TYPE", "ARCH", "VCPU", "GIB"]
    columns += ["USABLE CPU", "USABLE GIB", "EUR/H", "AS OF", *(["ZONE", "SOURCE"] if wide else [])]
    # The title only on a terminal: in a pipe the first line is the header, as in kubectl.
    title = f"{len(rows)} offerings with {sizes}, cheapest first" if is_tty() else None
    table = new_table(*columns, title=title)
    for row in rows:
        o = row.offering
        cells = [
            str(row.rank),
            o.provider,
            o.region,
            o.instance_type,
            o.arch,
            f"{o.vcpu:g}",
            f"{o.memory_gib:g}",
            f"{row.usable_cpu:.2f}",
            f"{row.usable_memory_gib:.2f}",
            f"{o.price_eur_per_hour:.4f}",
            (o.price_as_of or "—")[:10],  # the date; -o json has the whole timestamp
        ]
        table.add_row(*cells, *([o.zone or "—", o.price_source or "—"] if wide else []))
    print_table(table)
