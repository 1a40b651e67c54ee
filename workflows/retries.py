"""Retry policies, in one place: each names what it is for.

Activities that touch the world retry until they are done (an API server or cloud that is
down comes back), except where an error says no retry can help (`api/errors.py`: a missing
Secret, no capacity, a fatal provider error) or where giving up is the better answer (a
provider that keeps failing is as good as full; the mirror is only a view).
"""

from datetime import timedelta

from temporalio.common import RetryPolicy

from api import errors

# A claim's calls: until done, but never on an error no retry can fix.
CLAIM_CALL = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=errors.CLAIM_NON_RETRYABLE,
)
# A provider that keeps failing transiently is, for this claim, as good as out of capacity:
# the claim goes on to its next offering.
VM_CREATE = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=8,
    non_retryable_error_types=errors.CLAIM_NON_RETRYABLE,
)
# A VM must never outlive its claim: every error is retried (an expired credential can be
# fixed while the activity waits), visibly, in the Web UI's pending activities.
VM_DELETE = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=5),
)
# What is only shown (the NodeClaim mirror, the tailnet device's removal): a few tries, then
# the workflow goes on without it.
SHOWING = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
)
# A pool's calls: until done, but never on a configuration error.
POOL_CALL = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=errors.POOL_NON_RETRYABLE,
)
# Starting a round's claims: until Temporal takes them (a claim given up on could still have
# been started by the attempt that failed, and would run uncounted).
CLAIM_STARTS = RetryPolicy(
    initial_interval=timedelta(seconds=0.5), maximum_interval=timedelta(seconds=10)
)
# A pool's Events and status, and its look at which claims still run: the next round or look
# says it again.
FEW_TRIES = RetryPolicy(maximum_attempts=5)
# A scheduled run's calls (orphan GC, price refresh): the next run tries again.
SCHEDULED_RUN = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=3,
)
