"""OrphanGcWorkflow: remove VMs and bootstrap Secrets that no live claim owns.

Run every few minutes by the Schedule `cloudburst-orphan-gc` (see `worker/gc_schedule.py`,
overlap SKIP). One run: list (activity) → ask which claim workflows still run (activity) →
decide here → remove (activity) → report. The rules:

- a VM labelled for this cluster is an orphan when its claim's workflow is closed or unknown
  in every namespace whose NodeClasses reach its account (or, for a VM that records its
  claim's namespace, in that namespace alone; or it has no claim label) and it is older than
  the grace period. The activity leaves out what a failed or partial listing makes unknown:
  none of a provider's VMs when one of its listings failed;
- a bootstrap-token Secret is stale when it has expired, or its claim workflow is closed, or
  the workflow is unknown and the Secret is older than the grace period; a bootstrap-script
  Secret likewise, without the expiry rule.

The report (returned, queryable with `report`, summarised in the Web UI's current details)
counts what was removed and why.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.claim_workflows import ClaimWorkflowActivities
    from activities.gc import GcActivities
    from api.gc import (
        ClaimState,
        ClaimStates,
        ClaimStatesInput,
        GcInventory,
        LabelledSecret,
        OrphanGcInput,
        OrphanGcReport,
        OrphanVm,
        OwnedVm,
        RemovalResult,
        RemoveOrphansInput,
        SecretPurpose,
        StaleSecret,
    )
    from api.messages import claim_workflow_id
    from workflows.retries import SCHEDULED_RUN
    from workflows.timeouts import HEARTBEAT, PLANNING, QUICK_HEARTBEAT, VM_CALL


def _age_s(now: datetime, created: datetime | None) -> float | None:
    return None if created is None else (now - created).total_seconds()


@workflow.defn(name="OrphanGcWorkflow")
class OrphanGcWorkflow:
    def __init__(self) -> None:
        self._report: OrphanGcReport | None = None

    @workflow.query
    def report(self) -> OrphanGcReport | None:
        return self._report

    @workflow.run
    async def run(self, input: OrphanGcInput) -> OrphanGcReport:
        report = OrphanGcReport(cluster_id=input.cluster_id, dry_run=input.dry_run)
        self._report = report
        workflow.set_current_details(f"listing owned VMs of cluster `{input.cluster_id}`")
        inventory: GcInventory = await workflow.execute_activity_method(
            GcActivities.collect_orphans,
            input,
            start_to_close_timeout=VM_CALL,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=SCHEDULED_RUN,
            summary="list owned VMs and bootstrap Secrets",
        )
        report.providers = [
            f"{s.provider} ({s.namespace}/{s.node_class_name})" for s in inventory.scopes
        ]
        report.vms_seen = len(inventory.vms)
        report.secrets_seen = len(inventory.secrets)
        report.errors.extend(inventory.errors)

        claims = sorted(
            {wid for vm in inventory.vms for wid in _vm_claims(vm)}
            | {wid for s in inventory.secrets if (wid := _secret_claim(s))}
        )
        states = ClaimStates()
        if claims:
            states = await workflow.execute_activity_method(
                ClaimWorkflowActivities.claim_workflow_states,
                ClaimStatesInput(workflow_ids=claims),
                start_to_close_timeout=PLANNING,
                heartbeat_timeout=QUICK_HEARTBEAT,
                retry_policy=SCHEDULED_RUN,
                summary=f"which of {len(claims)} claim workflow(s) still run",
            )

        now = workflow.now()
        grace = input.grace_period_s
        for vm in inventory.vms:
            state = _vm_claim_state(vm, states)
            if vm.claim_name and state is ClaimState.RUNNING:
                report.vms_kept_live += 1
                continue
            age = _age_s(now, vm.created_at)
            # A VM whose age is unknown is treated as old: it is ours and nothing owns it.
            if age is not None and age < grace:
                report.vms_kept_young += 1
                continue
            why = "no claim label" if not vm.claim_name else f"claim workflow {state.value}"
            age_text = f", {age:.0f}s old" if age is not None else ""
            report.orphan_vms.append(OrphanVm(vm=vm, reason=f"{why}{age_text}"))

        for secret in inventory.secrets:
            wid = _secret_claim(secret)
            state = states.states.get(wid, ClaimState.UNKNOWN) if wid else ClaimState.UNKNOWN
            age = _age_s(now, secret.created_at)
            old = age is None or age >= grace
            reason = None
            if (
                secret.purpose is SecretPurpose.BOOTSTRAP_TOKEN
                and secret.expires_at is not None
                and secret.expires_at <= now
            ):
                reason = "token expired"
            elif state is ClaimState.CLOSED:
                reason = "claim workflow closed"
            elif state is ClaimState.UNKNOWN and old:
                reason = "no claim workflow" if secret.claim_name else "no claim label"
            if reason:
                report.stale_secrets.append(StaleSecret(secret=secret, reason=reason))

        if not input.dry_run and (report.orphan_vms or report.stale_secrets):
            workflow.set_current_details(
                f"removing {len(report.orphan_vms)} orphan VM(s) and "
                f"{len(report.stale_secrets)} stale Secret(s)"
            )
            removal: RemovalResult = await workflow.execute_activity_method(
                GcActivities.remove_orphans,
                RemoveOrphansInput(
                    scopes=inventory.scopes,
                    vms=report.orphan_vms,
                    secrets=report.stale_secrets,
                    delete_timeout_s=input.delete_timeout_s,
                ),
                start_to_close_timeout=timedelta(
                    seconds=120 + input.delete_timeout_s * max(1, len(report.orphan_vms))
                ),
                heartbeat_timeout=HEARTBEAT,
                retry_policy=SCHEDULED_RUN,
                summary=f"delete {len(report.orphan_vms)} VM(s), "
                f"{len(report.stale_secrets)} Secret(s)",
            )
            report.vms_deleted = removal.vms_deleted
            report.vms_pending = removal.vms_pending
            report.secrets_deleted = removal.secrets_deleted
            report.errors.extend(removal.errors)

        summary = report.summary()
        if report.vms_deleted or report.secrets_deleted or report.errors:
            workflow.logger.info("orphan GC: %s", summary)
        workflow.set_current_details(self._details(report))
        return report

    @staticmethod
    def _details(report: OrphanGcReport) -> str:
        lines = [f"**Orphan GC** — {report.summary()}", ""]
        for vm in report.vms_deleted:
            lines.append(f"- VM `{vm.instance_id}` (claim `{vm.claim_name}`): {vm.reason}")
        for vm_id in report.vms_pending:
            lines.append(f"- VM `{vm_id}`: deletion asked, not yet confirmed")
        for s in report.secrets_deleted:
            lines.append(f"- Secret `{s.namespace}/{s.name}` ({s.purpose.value}): {s.reason}")
        if report.dry_run:
            for o in report.orphan_vms:
                lines.append(f"- would delete VM `{o.vm.instance_id}`: {o.reason}")
            for st in report.stale_secrets:
                lines.append(
                    f"- would delete Secret `{st.secret.namespace}/{st.secret.name}`: {st.reason}"
                )
        for err in report.errors:
            lines.append(f"- error: {err}")
        return "\n".join(lines)


def _vm_claims(vm: OwnedVm) -> list[str]:
    """The workflow ids the VM's claim may have: one per namespace whose account lists it."""
    if not vm.claim_name:
        return []
    return [claim_workflow_id(namespace, vm.claim_name) for namespace in vm.namespaces]


def _vm_claim_state(vm: OwnedVm, states: ClaimStates) -> ClaimState:
    """Running if its claim runs in any of those namespaces, else closed if it ran in one."""
    found = {states.states.get(wid, ClaimState.UNKNOWN) for wid in _vm_claims(vm)}
    for state in (ClaimState.RUNNING, ClaimState.CLOSED):
        if state in found:
            return state
    return ClaimState.UNKNOWN


def _secret_claim(secret: LabelledSecret) -> str | None:
    if not secret.claim_name or not secret.claim_namespace:
        return None
    return claim_workflow_id(secret.claim_namespace, secret.claim_name)
