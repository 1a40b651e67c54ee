"""`cloudburst doctor`: is this cluster ready for Cloudburst, and if not, what to fix.

Two halves, as `linkerd check` keeps them: `gather.py` asks the cluster and Temporal and
records what it found (`facts.py`, plain data, never a verdict), and `checks.py` judges those
facts, each check a pure function of them with its own fast tests, into lines of ok / warn /
fail, each failure with its fix. `shipped.py` holds what the shipped manifests promise (the
ServiceAccounts' needs, the NetworkPolicies, the Deployments), which `tests/deploy` keeps
equal to deploy/base. docs/doctor.md describes every check.
"""
