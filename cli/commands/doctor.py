"""`cloudburst doctor`: check that a cluster is ready for Cloudburst, as `linkerd check` and
`cilium status` do, one line a check (ok, warn or fail) and, where it is not ok, the fix.

The checks and what each one fixes: docs/doctor.md. `-o json` prints them for scripts; the
exit code is 1 when any check failed (warnings alone leave it 0), 2 when nothing could be
checked (no Kubernetes configuration, or its API server does not answer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from rich.text import Text

from cli.connect import Kubeconfig, TemporalAddress, cli_settings, err_console
from cli.doctor.checks import CheckLine, Status, failed, judge, summary
from cli.doctor.gather import NETWORK_TIMEOUT_S, REVIEWS_AT_ONCE, Gatherer, expected_crds
from cli.output import Output, OutputFormat, print_data, stdout_console
from cluster.tenancy import DEFAULT_WORKER_NAMESPACE

MARKS = {Status.OK: ("✔", "green"), Status.WARN: ("‼", "yellow"), Status.FAIL: ("✘", "red")}


def doctor(
    kubeconfig: Kubeconfig = None,
    context: Annotated[
        str | None, typer.Option("--context", help="the kubeconfig context (as kubectl's)")
    ] = None,
    namespace: Annotated[
        str,
        typer.Option("--namespace", "-n", help="the namespace Cloudburst is installed in"),
    ] = DEFAULT_WORKER_NAMESPACE,
    temporal_address: TemporalAddress = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Check the cluster and Temporal before the first claim needs them: the CRDs at this
    release, the ServiceAccounts' rights, the worker, trigger and CSR approver ready,
    Temporal reachable and with TLS, cluster-info and the join address, bootstrap-token
    auth, the tenant admission plugins, the NetworkPolicies, each NodeClass's credential
    and the prices' age (docs/doctor.md).

    Temporal is reached at --temporal-address, else $CLOUDBURST_TEMPORAL_ADDRESS, else the
    installed address (inside the cluster). Exit 1 when a check failed, 2 when the API
    server cannot be reached.
    -o json|yaml prints {"checks": [{check, status, message, fix}], "summary": {...}}."""
    settings = cli_settings(kubeconfig=kubeconfig)
    try:
        api_client = _kube_client(kubeconfig, context)
    except Exception as err:  # the kubeconfig loaders raise several unrelated types
        err_console.print(Text.assemble(("error:", "red"), f" no Kubernetes configuration: {err}"))
        raise typer.Exit(2) from None
    with api_client:
        try:
            k8s.VersionApi(api_client).get_code(_request_timeout=NETWORK_TIMEOUT_S)
        except Exception as err:  # urllib3's and the client's errors alike: nothing to check
            host = api_client.configuration.host
            err_console.print(
                Text.assemble(("error:", "red"), f" cannot reach the API server at {host}: {err}")
            )
            raise typer.Exit(2) from None
        facts = Gatherer(api_client, namespace, temporal_address, settings).gather()
    lines = judge(facts, expected_crds())
    if output.is_data:
        print_data(
            {
                "namespace": namespace,
                "checks": [line.model_dump(mode="json") for line in lines],
                "summary": summary(lines),
            },
            output,
        )
    else:
        print_lines(lines, namespace)
    if failed(lines):
        raise typer.Exit(1)


def print_lines(lines: list[CheckLine], namespace: str) -> None:
    console = stdout_console()
    console.print(f"Cloudburst in namespace {namespace}")
    width = max(len(line.check) for line in lines)
    for line in lines:
        mark, style = MARKS[line.status]
        console.print(Text.assemble((mark, style), f" {line.check.ljust(width)}  {line.message}"))
        if line.fix:
            console.print(f"    fix: {line.fix}")
    counts = summary(lines)
    console.print(
        f"\n{counts['ok']} ok, {counts['warn']} warning(s), {counts['fail']} failed"
        + (" (see docs/doctor.md)" if counts["fail"] or counts["warn"] else "")
    )


def _kube_client(kubeconfig: Path | None, context: str | None) -> k8s.ApiClient:
    """The kubeconfig's (or $KUBECONFIG's) context, else the in-cluster service account."""
    configuration = k8s.Configuration()
    try:
        k8s_config.load_kube_config(
            config_file=str(kubeconfig) if kubeconfig else None,
            context=context,
            client_configuration=configuration,
        )
    except k8s_config.ConfigException:
        if kubeconfig is not None or context is not None:
            raise
        k8s_config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = REVIEWS_AT_ONCE
    return k8s.ApiClient(configuration)
