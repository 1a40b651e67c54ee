"""Answers to *why*: a pod that waits, a node that stays, a plan before anything is bought.

Pure: each function takes what the command read (cluster objects, Events, the pools' and
claims' queries) and returns the answer (`api/explain.py`); `cli/commands/explain.py` and
`cli/commands/plan.py` read and print.
"""
