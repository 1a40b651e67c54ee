"""Pure decisions of the workflows: no Temporal, no clock, no I/O — plain functions of their
arguments, each with unit tests of its own (tests/unit/decisions)."""
