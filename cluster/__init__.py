"""Cluster knowledge shared by the trigger, the activities, the workflows and the CLI: what
Kubernetes objects mean to an autoscaler. Pure functions over the `kubernetes` client's
models (or anything shaped like them) and rules read from settings (`cluster/tenancy.py`):
no API calls, and of Temporal only the error type a tenancy refusal raises; safe in the
workflow sandbox. The layering (docs/architecture.md) is api → cluster → observability →
workflows / activities → worker / trigger → explain → cli."""
