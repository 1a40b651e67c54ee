"""Cluster knowledge shared by the trigger, the activities, the workflows and the CLI: what
Kubernetes objects mean to an autoscaler. Pure functions over the `kubernetes` client's
models (or anything shaped like them): no API calls, no Temporal, safe in the workflow
sandbox. The layering is api → cluster → workflows/activities → worker/trigger → cli."""
