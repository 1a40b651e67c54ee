"""A stateful fake cloud with a Hetzner-like HTTP API, for the `fake` provider.

`FakeCloud` holds the state (thread-safe, usable in-process by tests and the simulated
kubelets); `FakeCloudServer` serves it over HTTP so that the product reaches it exactly as
it reaches a real cloud.
"""

from sim.cloud.server import FakeCloudServer
from sim.cloud.state import (
    DEFAULT_INSTANCE_TYPES,
    FAILURE_KINDS,
    OPS,
    CloudError,
    FakeCloud,
    FakeInstanceType,
)

__all__ = [
    "DEFAULT_INSTANCE_TYPES",
    "FAILURE_KINDS",
    "OPS",
    "CloudError",
    "FakeCloud",
    "FakeCloudServer",
    "FakeInstanceType",
]
