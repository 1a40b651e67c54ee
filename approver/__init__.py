"""`cloudburst csr-approver`: who may be a node. It approves the kubelet certificates of
Cloudburst's claims (`cluster/certificates.py`), forgets the Nodes of claims that ended and
evicts other namespaces' pods from tenant nodes (`cluster/node_guard.py`). A Deployment of its
own, with an identity of its own (docs/security.md): neither the worker nor the trigger may
approve certificates."""
