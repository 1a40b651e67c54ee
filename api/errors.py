"""Every error type that crosses the Temporal boundary: raised by activities as
`ApplicationError(type=...)`, read by workflows from `ActivityError`. One place, both sides:
a renamed type is a rename here, which mypy follows to every raise and every check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from temporalio.exceptions import ApplicationError

# The offering has no capacity now (try the next one; the pool caches it as failed).
CAPACITY_ERROR: Final = "CapacityError"
# The provider refused for good (auth, quota, a bad request): retrying will not help.
PROVIDER_FATAL: Final = "ProviderFatal"
# Retried, honouring the provider's Retry-After (`next_retry_delay`).
PROVIDER_RETRYABLE: Final = "ProviderRetryable"
# Anything else a provider raised: retried by the activity's policy.
PROVIDER_ERROR: Final = "ProviderError"
# The user's configuration is wrong (a missing Secret, a refused endpoint, a bad spec):
# never retried; the message says what to fix, the workflow turns it into status.
INVALID_CONFIGURATION: Final = "InvalidConfiguration"
# The price recommender (CloudBroker API) cannot be reached now: retried.
RECOMMENDER_UNAVAILABLE: Final = "RecommenderUnavailable"
# The claim's Node does not exist (any more).
NODE_NOT_FOUND: Final = "NodeNotFound"
# The object kept changing under an optimistic-concurrency write: retried.
KUBE_CONFLICT: Final = "KubeApi409"
# A query's failure while a worker takes a workflow over (`worker/untaken_events.py`): the
# commands that query ask again.
QUERY_REFUSED_DURING_TAKEOVER: Final = (
    "not answered: this worker was rebuilding the workflow from events no workflow task has "
    "taken yet (its previous worker stopped); ask again in a few seconds"
)


def application_error(
    message: str, *details: object, type: str, non_retryable: bool = False
) -> ApplicationError:
    """Temporal's `ApplicationError` of one of these types, its SDK imported only now: code
    the command line runs too (the planner's reads, the tenancy rules, Secret reads) raises
    the worker's errors without loading Temporal for every command that never fails."""
    from temporalio.exceptions import ApplicationError

    return ApplicationError(message, *details, type=type, non_retryable=non_retryable)


def kube_api_error(status: int | None) -> str:
    """`KubeApi<status>` for a Kubernetes API error (retried by the activity's policy)."""
    return f"KubeApi{status or 'Error'}"


# What a claim's activities never retry; a pool's planning never retries bad configuration.
CLAIM_NON_RETRYABLE: Final = [CAPACITY_ERROR, PROVIDER_FATAL, INVALID_CONFIGURATION, NODE_NOT_FOUND]
POOL_NON_RETRYABLE: Final = [INVALID_CONFIGURATION]
