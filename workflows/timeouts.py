"""How long activities may take, in one place.

Every activity heartbeats — the worker's `HeartbeatInterceptor` beats for those that do not
report progress themselves — so an attempt on a worker that died is given up after
`QUICK_HEARTBEAT` (short calls) or `HEARTBEAT` (long ones) and retried on another worker
within seconds, whatever its start-to-close timeout. The start-to-close timeouts only bound
a call that hangs in a live worker.
"""

from datetime import timedelta

HEARTBEAT = timedelta(seconds=5)
# For the short calls (`KUBE_CALL`, `PLANNING`): a dead worker's attempt is retried sooner,
# and it costs nothing while the worker lives — an attempt sends one beat as it starts and
# another only if it runs past 80 % of this (the SDK's throttle). The long calls keep
# `HEARTBEAT`: they beat all along, and every beat that reaches the server is billed.
QUICK_HEARTBEAT = timedelta(seconds=2)
# One or a few Kubernetes API calls.
KUBE_CALL = timedelta(seconds=30)
# Packing and ranking offerings; reading the cluster for consolidation.
PLANNING = timedelta(minutes=2)
# A cloud's create or delete, waited on until the VM runs or is gone.
VM_CALL = timedelta(minutes=10)
