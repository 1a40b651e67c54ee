"""A Kubernetes API server emulator for the official `kubernetes` client, over plain HTTP.

    server = KubeApiServer(host="127.0.0.1", port=0)   # port 0: pick a free port
    server.start()                 # non-blocking, idempotent; serves in a daemon thread
    server.url                     # "http://127.0.0.1:PORT"
    server.ca_cert_pem             # the cluster CA (self-signed EC P-256, CA:TRUE)
    server.write_kubeconfig(path)  # no auth, context "cloudburst-sim"
    server.api_client()            # a configured kubernetes.client.ApiClient
    server.stop()

Serves core/v1 (namespaces, nodes, pods, secrets, configmaps, events, serviceaccounts,
services, replicationcontrollers), events.k8s.io/v1 events (the core events in their other
shape), policy/v1 PDBs, apps/v1 deployments, replicasets, statefulsets and daemonsets, batch/v1
jobs and cronjobs, coordination leases, rbac.authorization.k8s.io roles and bindings,
apiregistration APIServices, apiextensions CustomResourceDefinitions (stored; the ones served
are seeded), the SelfSubject*Reviews, and the namespaced `cloudburst.io/v1alpha1` nodepools,
nodeclasses and nodeclaims. Controllers are not here: sim/controllers.py runs the
Deployment -> ReplicaSet -> Pod chain through the API, like kube-controller-manager.

What kubectl needs of a real server is here (tests/sim/test_kubectl_conformance.py runs it):
discovery with short names and categories (legacy and aggregated), Tables with the built-in
printers' columns and the CRDs' additionalPrinterColumns, partial-metadata lists,
`limit`/`continue`, watch-list (`sendInitialEvents` and its closing BOOKMARK), protobuf
request bodies of built-in kinds (sim/kubeapi/protobuf.py: kubectl's typed commands send
nothing else), `/openapi/v2` and `/openapi/v3` with the built-ins' schemas
(builtin_schemas.json) and the CRDs', strategic merge by each list's merge key from those
schemas, `metadata.managedFields` on every write and server-side apply (sim/kubeapi/apply.py),
the `scale` subresource, Service defaults, pods' default tolerations
(DefaultTolerationSeconds), a `default` ServiceAccount per namespace, `?dryRun=All`, and the
server's Status bodies and media-type errors.

Pods are admitted as by a kube-apiserver with `--enable-admission-plugins=PodNodeSelector,
PodTolerationRestriction` (sim/kubeapi/pod_admission.py): a namespace's node-selector,
default-tolerations and tolerations-whitelist annotations are merged into or judge its pods.
`KubeApiServer(disable_admission_plugins=[...])` turns them off.

Writes are judged as a real server judges them (sim/kubeapi/admission.py): custom resources
against the CRDs in deploy/base/crds (structural schema, unknown-field pruning and
`?fieldValidation=Strict`, CEL rules when cel-python is installed, ratcheting of unchanged
values), built-in kinds against their schemas for unknown fields and Pods, Nodes and pod
templates by their resource quantities; refusals are the server's 400/422 Status bodies.

Where it deliberately differs from a real server (it is a test double):
- built-in kinds keep the `status` given on create, and their main-resource writes may
  change it (custom resources follow the real rules: `/status` only);
- built-in kinds are validated only for unknown fields and quantities; of kube-apiserver's
  admission plugins, only DefaultTolerationSeconds, PodNodeSelector and
  PodTolerationRestriction; defaulting only where kubectl shows it (Services, workloads, pod
  phase);
  deleting a pod removes it at once, PDB status is computed on read;
- `store.create(...)` called directly (no `WriteOptions`) skips validation: tests plant
  objects a real server would have refused that way;
- a stored CustomResourceDefinition does not register a new resource (the served custom
  resources are fixed); no authentication (every client is a cluster admin, unless a test
  `forbid`s); answers are JSON only (clients that accept only protobuf get a 406);
  `continue` tokens page the current state, not a snapshot.
"""

from sim.kubeapi.server import KubeApiServer

__all__ = ["KubeApiServer"]
