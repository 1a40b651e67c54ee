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

Where it deliberately differs from a real server (it is a test double):
- built-in kinds keep the `status` given on create, and their main-resource writes may
  change it (custom resources follow the real rules: `/status` only);
- no admission, defaulting beyond pod phase Pending, schema validation, or controllers:
  pods never run, deleting a pod removes it at once, PDB status is computed on read;
- `limit`/`continue` are ignored (lists return everything); no protobuf, no server-side
  apply; no authentication.
"""

from sim.kubeapi.server import KubeApiServer

__all__ = ["KubeApiServer"]
