"""A Kubernetes API server emulator for the official `kubernetes` client, over plain HTTP.

    server = KubeApiServer(host="127.0.0.1", port=0)   # port 0: pick a free port
    server.start()                 # non-blocking, idempotent; serves in a daemon thread
    server.url                     # "http://127.0.0.1:PORT"
    server.ca_cert_pem             # the cluster CA (self-signed EC P-256, CA:TRUE)
    server.write_kubeconfig(path)  # no auth, context "cloudburst-sim"
    server.api_client()            # a configured kubernetes.client.ApiClient
    server.stop()

Serves core/v1 (namespaces, nodes, pods, secrets, configmaps, events, serviceaccounts,
services), policy/v1 PDBs, apps/v1 deployments and daemonsets (stored only: no
controllers), events.k8s.io/v1 events (stored apart from core events), coordination leases,
and the namespaced `cloudburst.io/v1alpha1` nodepools, nodeclasses and nodeclaims.

Writes are judged as a real server judges them (sim/kubeapi/admission.py): custom resources
against the CRDs in deploy/base/crds (structural schema, unknown-field pruning and
`?fieldValidation=Strict`, CEL rules when cel-python is installed, ratcheting of unchanged
values), Pods, Nodes and pod templates by their resource quantities; refusals are the
server's 400/422 Status bodies. `/openapi/v3` lists enough for kubectl to send
`fieldValidation=Strict`.

Where it deliberately differs from a real server (it is a test double):
- built-in kinds keep the `status` given on create, and their main-resource writes may
  change it (custom resources follow the real rules: `/status` only);
- built-in kinds are validated only for their quantities; no admission plugins, defaulting
  beyond pod phase Pending, or controllers: pods never run, deleting a pod removes it at
  once, PDB status is computed on read;
- `store.create(...)` called directly (no `WriteOptions`) skips validation: tests plant
  objects a real server would have refused that way;
- `limit`/`continue` are ignored (lists return everything); no protobuf, no server-side
  apply; no authentication.
"""

from sim.kubeapi.server import KubeApiServer

__all__ = ["KubeApiServer"]
