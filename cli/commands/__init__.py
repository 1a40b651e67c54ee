"""The `cloudburst` commands that need a module of their own, one module a command, named after
it: `claims.py` holds `cloudburst claims …` (the typer app `claims_app`), `pools.py`,
`bootstrap.py` and `catalog.py` likewise; `crds.py` and `tenant_rbac.py` the single commands
`cloudburst crds` and `cloudburst tenant-rbac`.

`cli/main.py` builds the `cloudburst` app from them, naming each by "module:attribute" so that
it is imported only when it is run, completed or listed by `--help` (`cli/lazy_group.py`), and
holds the short top-level commands (`worker`, `trigger`, `validate`, `codec-server`); `dev`
and `demo` are the simulator's (`sim/dev/commands.py`), plugged in where it is installed. The
other modules of `cli/` are what the commands share, named for what they do (`connect.py`,
`output.py`, `manifests.py`, `manual_claims.py`, `timeline.py`); none of them defines a command.
"""
