"""Deterministic orchestration; the worker registers `workflows.registry.WORKFLOWS`.

Nothing is imported here: the sandbox runs this file again for every workflow run.
"""
