"""`cloudburst claims`: NodeClaims as operators see and steer them (one workflow per node)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated

import typer
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from rich.live import Live
from rich.table import Table
from rich.text import Text
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from api import NodeClaimStatus, search_attributes
from api._base import CamelModel
from api.messages import ScaleDownRequest, ScaleDownResult, claim_key_of, claim_workflow_id
from cli.cluster_reads import deployed_tenancy
from cli.connect import (
    AllNamespaces,
    Kubeconfig,
    KubeContext,
    ListNamespace,
    Namespace,
    Selector,
    TemporalAddress,
    answered,
    cli_settings,
    connect_or_exit,
    err_console,
    fail,
    list_namespace,
    pause,
    run_or_exit,
    stop_on_signals,
)
from cli.manual_claims import (
    ClaimError,
    build_claim,
    check_offering,
    load_pool,
    new_claim_name,
    parse_offering,
    price_offering,
    start_claim,
)
from cli.output import (
    Output,
    OutputFormat,
    TableStream,
    age,
    dump,
    is_tty,
    items,
    new_table,
    print_data,
    print_table,
    stdout_console,
    stream_data,
)
from cli.timeline import PhaseSpan, format_duration, phase_timeline
from worker.kube_client import kube_api_client
from workflows.nodeclaim import NodeClaimWorkflow

claims_app = typer.Typer(help="Inspect and steer NodeClaims (one workflow per node).")

LIST_COLUMNS = ("NAMESPACE", "NAME", "NODEPOOL", "PROVIDER", "REGION", "INSTANCE", "PHASE", "AGE")
WIDE_COLUMNS = ("STATUS", "WORKFLOW")


class ClaimSummary(CamelModel):
    """One claim as `claims list` shows it, from Temporal visibility (no workflow query)."""

    namespace: str
    name: str
    node_pool: str = ""
    provider: str = ""
    region: str = ""
    instance_type: str = ""
    phase: str = ""
    # As a visibility query spells it: Running, Completed, Failed, Terminated, TimedOut...
    execution_status: str = ""
    workflow_id: str
    run_id: str
    started_at: datetime
    closed_at: datetime | None = None

    @classmethod
    def of(cls, execution: WorkflowExecution) -> ClaimSummary:
        attrs = execution.typed_search_attributes
        namespace, name = claim_key_of(execution.id) or ("", execution.id)
        return cls(
            namespace=namespace,
            name=name,
            node_pool=attrs.get(search_attributes.NODE_POOL) or "",
            provider=attrs.get(search_attributes.PROVIDER) or "",
            region=attrs.get(search_attributes.REGION) or "",
            instance_type=attrs.get(search_attributes.INSTANCE_TYPE) or "",
            phase=attrs.get(search_attributes.PHASE) or "",
            execution_status=_status_name(execution.status),
            workflow_id=execution.id,
            run_id=execution.run_id,
            started_at=execution.start_time,
            closed_at=execution.close_time,
        )

    def row(self, wide: bool) -> list[str]:
        cells = [
            self.namespace,
            self.name,
            self.node_pool,
            self.provider,
            self.region,
            self.instance_type,
            self.phase,
            age(datetime.now(UTC) - self.started_at),
        ]
        return [*cells, self.execution_status, self.workflow_id] if wide else cells

    def changed_from(self, before: ClaimSummary | None) -> bool:
        # A new run (continue-as-new) of the same claim is not news to a reader.
        same = {"run_id", "started_at"}
        return before is None or self.model_dump(exclude=same) != before.model_dump(exclude=same)


class TimelineSpan(CamelModel):
    phase: str
    since: datetime
    until: datetime | None  # None: the phase it is in now
    duration_seconds: float


class ClaimDescription(CamelModel):
    """`claims describe -o json|yaml`: the claim's status as its workflow answers the query,
    and its phase timeline from the workflow history."""

    namespace: str
    name: str
    workflow_id: str
    execution_status: str
    status: NodeClaimStatus
    timeline: list[TimelineSpan]


@claims_app.command("create")
def claims_create(
    pool: Annotated[str, typer.Option(help="NodePool name")],
    offering: Annotated[
        list[str], typer.Option(help="PROVIDER/REGION/INSTANCE-TYPE; repeat to rank fallbacks")
    ],
    namespace: Namespace = "default",
    name: Annotated[str | None, typer.Option(help="claim name (default: <pool>-<random>)")] = None,
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
    kube_context: KubeContext = None,
) -> None:
    """Create a NodeClaim by hand: one node of the given offering for the pool."""
    settings = cli_settings(temporal_address, kubeconfig, kube_context)
    try:
        wanted = [parse_offering(text) for text in offering]
        api_client = kube_api_client(settings)
        # Judged as the worker and the trigger judge it: by the deployed settings (their
        # ConfigMap), not this shell's environment, which may serve or allow more.
        tenancy, judged_by = deployed_tenancy(k8s.CoreV1Api(api_client), settings)
        if judged_by.startswith("this shell"):
            err_console.print(f"note: tenancy from {judged_by}", style="yellow", highlight=False)
        context = load_pool(api_client, namespace, pool, tenancy)
        offerings = []
        for candidate in wanted:
            priced, note = price_offering(api_client, context, candidate)
            if note:
                err_console.print(f"note: {note}", style="yellow", highlight=False)
            check_offering(context, priced)
            offerings.append(priced)
    except ClaimError as err:
        raise fail(str(err)) from None
    claim = build_claim(context, offerings, name or new_claim_name(pool))

    async def main() -> None:
        client = await connect_or_exit(settings)
        await start_claim(
            client,
            api_client,
            context,
            claim,
            task_queue=settings.task_queue,
            cluster_id=settings.cluster_id,
            task_timeout=settings.claim_task_timeout(),
        )

    try:
        run_or_exit(main(), settings)
    except RPCError as err:
        if err.status == RPCStatusCode.ALREADY_EXISTS:
            raise fail(f"a NodeClaim named {claim.metadata.name} already exists") from None
        raise
    except ClaimError as err:
        raise fail(str(err)) from None
    except ApiException as err:
        if err.status != 403:
            raise
        raise fail(
            f"creating NodeClaim {namespace}/{claim.metadata.name} was refused (403): a claim "
            "made by hand needs `create` on nodeclaims there, which the cluster's edit role "
            'does not give (docs/security.md, "Authority from the cluster")'
        ) from None
    stdout_console().print(
        Text.assemble(
            "NodeClaim ",
            (claim.metadata.name, "bold"),
            f" started (workflow {claim_workflow_id(namespace, claim.metadata.name)})",
        )
    )


@claims_app.command("list")
def claims_list(
    pool: Annotated[str | None, typer.Option(help="only this NodePool")] = None,
    all_claims: Annotated[
        bool, typer.Option("--all", help="include Deleted/Failed claims")
    ] = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            "-w",
            help="until Ctrl-C: a live table on a terminal; elsewhere a line per change "
            "(-o json: a JSON object per line)",
        ),
    ] = False,
    interval: Annotated[float, typer.Option(help="--watch refresh, seconds")] = 2.0,
    output: Output = OutputFormat.TABLE,
    namespace: ListNamespace = None,
    all_namespaces: AllNamespaces = False,
    selector: Selector = None,
    temporal_address: TemporalAddress = None,
    kubeconfig: Kubeconfig = None,
    context: KubeContext = None,
) -> None:
    """NAME NODEPOOL PROVIDER REGION INSTANCE PHASE AGE, from Temporal visibility.

    -o wide adds the execution STATUS and the WORKFLOW id.
    -o json|yaml prints an object with "items", each claim with every field: name, nodePool,
    provider, region, instanceType, phase, executionStatus, workflowId, runId, startedAt,
    closedAt. -n narrows the list to a namespace, -l to the NodeClaims whose labels match
    (read from the cluster: a claim whose NodeClaim is gone is not listed with -l)."""
    from cli.cluster_reads import listed

    settings = cli_settings(temporal_address, kubeconfig, context)
    keep = listed(settings, "nodeclaims", list_namespace(namespace, all_namespaces), selector)
    query = "WorkflowType = 'NodeClaimWorkflow'"
    if pool:
        query += f" AND CloudburstNodePool = '{pool}'"
    if not all_claims:
        query += " AND ExecutionStatus = 'Running'"
    wide = output == OutputFormat.WIDE

    async def main() -> list[ClaimSummary]:
        client = await connect_or_exit(settings)
        if not watch:
            return await _list_claims(client, query, keep)
        stop = stop_on_signals()  # Ctrl-C ends the watch between two lists, exit status 0
        if is_tty() and not output.is_data:
            await _watch_live(client, query, keep, wide, interval, stop)
        else:
            await _watch_stream(client, query, keep, output, interval, stop)
        return []

    try:
        claims = run_or_exit(main(), settings)
    except KeyboardInterrupt:  # a second Ctrl-C, in the middle of a call
        return
    if watch:
        return
    if output.is_data:
        print_data(items(claims), output)
    else:
        print_table(_claims_table(claims, wide))


ClaimFilter = Callable[[str, str], bool]


async def _list_claims(client: Client, query: str, keep: ClaimFilter) -> list[ClaimSummary]:
    found = [ClaimSummary.of(execution) async for execution in client.list_workflows(query)]
    return [claim for claim in found if keep(claim.namespace, claim.name)]


def _claims_table(claims: Sequence[ClaimSummary], wide: bool) -> Table:
    table = new_table(*LIST_COLUMNS, *(WIDE_COLUMNS if wide else ()))
    for claim in claims:
        table.add_row(*claim.row(wide))
    return table


async def _watch_live(
    client: Client,
    query: str,
    keep: ClaimFilter,
    wide: bool,
    interval: float,
    stop: asyncio.Event,
) -> None:
    """A table redrawn in place: only on a terminal, where it can be."""
    table = _claims_table(await _list_claims(client, query, keep), wide)
    with Live(table, console=stdout_console(), auto_refresh=False) as live:
        while True:
            await pause(stop, interval)
            if stop.is_set():
                break
            table = _claims_table(await _list_claims(client, query, keep), wide)
            table.caption = f"every {interval:g}s · {datetime.now():%H:%M:%S} · Ctrl-C to stop"
            live.update(table, refresh=True)


async def _watch_stream(
    client: Client,
    query: str,
    keep: ClaimFilter,
    output: OutputFormat,
    interval: float,
    stop: asyncio.Event,
) -> None:
    """Every claim once, then a line each time one changes (kubectl's `get -w`): a claim that
    leaves the list (it ended) is shown once more as it ended."""
    wide = output == OutputFormat.WIDE
    rows = TableStream([*LIST_COLUMNS, *(WIDE_COLUMNS if wide else ())])
    seen: dict[str, ClaimSummary] = {}
    while not stop.is_set():
        current = {claim.name: claim for claim in await _list_claims(client, query, keep)}
        changed = [claim for name, claim in current.items() if claim.changed_from(seen.get(name))]
        for name in seen.keys() - current.keys():
            ended = await _ended(client, seen[name])
            if ended is not None and ended.changed_from(seen[name]):
                changed.append(ended)
        if output.is_data:
            for claim in changed:
                stream_data(dump(claim), output)
        else:
            rows.print([claim.row(wide) for claim in changed])
        seen = current
        await pause(stop, interval)


async def _ended(client: Client, claim: ClaimSummary) -> ClaimSummary | None:
    """The claim as its workflow ended, or None once Temporal no longer knows it."""
    try:
        description = await client.get_workflow_handle(claim.workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return ClaimSummary.of(description)


@claims_app.command("describe")
def claims_describe(
    name: str,
    namespace: Namespace = "default",
    output: Output = OutputFormat.TABLE,
    temporal_address: TemporalAddress = None,
) -> None:
    """Phase, offering, price, instance, node, conditions and the phase timeline of one claim.

    -o wide adds the provider ID and the creation, ready and deletion times.
    -o json|yaml prints the claim's full status (as its workflow answers) and its timeline."""
    settings = cli_settings(temporal_address)

    async def main() -> tuple[NodeClaimStatus, WorkflowExecutionStatus | None, list[PhaseSpan]]:
        client = await connect_or_exit(settings)
        handle = client.get_workflow_handle_for(
            NodeClaimWorkflow.run, claim_workflow_id(namespace, name)
        )
        try:
            description = await handle.describe()
            status = await answered(lambda: handle.query(NodeClaimWorkflow.status))
            timeline = await phase_timeline(client, claim_workflow_id(namespace, name))
        except TimeoutError:
            raise fail(f"NodeClaim {namespace}/{name}: no answer (is a worker running?)") from None
        except WorkflowQueryFailedError as err:
            raise fail(f"NodeClaim {namespace}/{name}: {err}") from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise fail(f"no NodeClaim {name} in namespace {namespace}") from None
            raise
        return status, description.status, timeline

    status, execution, timeline = run_or_exit(main(), settings)
    if output.is_data:
        now = datetime.now(UTC)
        description = ClaimDescription(
            namespace=namespace,
            name=name,
            workflow_id=claim_workflow_id(namespace, name),
            execution_status=_status_name(execution),
            status=status,
            timeline=[
                TimelineSpan(
                    phase=span.phase,
                    since=span.since,
                    until=span.until,
                    duration_seconds=span.duration(now).total_seconds(),
                )
                for span in timeline
            ],
        )
        print_data(dump(description), output)
        return
    print_claim(namespace, name, status, execution, timeline, wide=output == OutputFormat.WIDE)


def print_claim(
    namespace: str,
    name: str,
    status: NodeClaimStatus,
    execution: WorkflowExecutionStatus | None,
    timeline: list[PhaseSpan],
    *,
    wide: bool = False,
) -> None:
    """`claims describe` for a person: the facts, the conditions, the timeline."""
    console = stdout_console()
    console.print(
        Text.assemble(
            (f"NodeClaim {namespace}/{name}", "bold"),
            f"  workflow {claim_workflow_id(namespace, name)} ({_status_name(execution) or '?'})",
        )
    )
    price = status.price_eur_per_hour
    rows = [
        ("Phase", status.phase.value),
        (
            "Provider",
            f"{status.provider or '—'} / {status.region or '—'} / {status.instance_type or '—'}",
        ),
        ("Price", f"€{price:.4f}/h{_provenance(status)}" if price is not None else "—"),
        ("Instance", status.instance_id or "—"),
        ("Node", status.node_name or "—"),
        ("Capacity", ", ".join(f"{k}={v}" for k, v in status.capacity.items()) or "—"),
    ]
    if wide:
        rows += [
            ("Provider ID", status.provider_id or "—"),
            ("Created", _when(status.created_at)),
            ("Ready since", _when(status.ready_at)),
            ("Deleted", _when(status.deleted_at)),
        ]
    if status.failure_message:
        rows.append(("Failure", f"{status.failure_reason}: {status.failure_message}"))
    if status.deletion_reason:
        rows.append(("Deletion reason", status.deletion_reason))
    for key, value in rows:
        console.print(f"  {key:<16}{value}")
    conditions = new_table("TYPE", "STATUS", "REASON", "MESSAGE", "SINCE")
    for condition in status.conditions:
        conditions.add_row(
            condition.type,
            condition.status,
            condition.reason,
            condition.message,
            _when(condition.last_transition_time),
        )
    print_table(conditions)
    print_table(_timeline_table(timeline))


def _timeline_table(timeline: list[PhaseSpan]) -> Table:
    """Each phase with when it began and how long it lasted (the last: so far)."""
    table = new_table("PHASE", "SINCE", "DURATION", title="Timeline")
    now = datetime.now(UTC)
    for span in timeline:
        lasted = format_duration(span.duration(now))
        table.add_row(span.phase, _when(span.since), lasted if span.until else f"{lasted} (so far)")
    if timeline:
        end = timeline[-1].until or now
        table.add_row(Text("total", style="bold"), "", format_duration(end - timeline[0].since))
    return table


@claims_app.command("scale-down")
def claims_scale_down(
    name: str,
    namespace: Namespace = "default",
    reason: Annotated[str, typer.Option(help="why; recorded on the claim")] = "Manual",
    force: Annotated[
        bool, typer.Option(help="skip the pool's disruption budgets and do-not-disrupt pods")
    ] = False,
    temporal_address: TemporalAddress = None,
) -> None:
    """Drain and delete a claim's node (an update: answered accepted/rejected).

    A pool's claim waits for a disruption permit within the pool's budgets unless --force."""
    settings = cli_settings(temporal_address)

    async def main() -> ScaleDownResult:
        client = await connect_or_exit(settings)
        handle = client.get_workflow_handle_for(
            NodeClaimWorkflow.run, claim_workflow_id(namespace, name)
        )
        try:
            return await handle.execute_update(
                NodeClaimWorkflow.request_scale_down, ScaleDownRequest(reason=reason, force=force)
            )
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            message = getattr(cause, "message", None) or str(cause)
            return ScaleDownResult(accepted=False, reason=message)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise fail(f"no running NodeClaim {name} in namespace {namespace}") from None
            raise

    result = run_or_exit(main(), settings)
    if not result.accepted:
        raise fail(f"scale-down rejected: {result.reason}")
    stdout_console().print(Text.assemble(("accepted", "green"), f": {result.reason}"))


def _status_name(status: WorkflowExecutionStatus | None) -> str:
    """RUNNING -> Running, TIMED_OUT -> TimedOut: as a visibility query writes them."""
    if status is None:
        return ""
    return "".join(part.capitalize() for part in status.name.split("_"))


def _provenance(status: NodeClaimStatus) -> str:
    said = [status.price_source, f"as of {status.price_as_of}" if status.price_as_of else None]
    return f" ({', '.join(s for s in said if s)})" if any(said) else ""


def _when(moment: datetime | None) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S") if moment else "—"
