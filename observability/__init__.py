"""What Cloudburst tells operators, shared by the activities and the trigger: Kubernetes Events
(`observability/events.py`) and the `cloudburst_*` metrics (`observability/metrics.py`).

These have side effects (Kubernetes API calls, OpenTelemetry instruments), so they are not
for workflow code: a workflow records an Event through the `record_events` activity. The
layering (docs/architecture.md) is api → cluster → observability → workflows / activities →
worker / trigger → explain → cli; workflows import none of it."""
