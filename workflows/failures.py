"""What an activity's failure says, as workflows read it."""

from temporalio.exceptions import ActivityError, ApplicationError


def cause(err: ActivityError) -> str:
    """What went wrong, as the activity said it."""
    inner = err.cause
    return str(inner.message if isinstance(inner, ApplicationError) else inner or err)


def error_type(err: ActivityError) -> str | None:
    return err.cause.type if isinstance(err.cause, ApplicationError) else None


def is_fatal(err: ActivityError) -> bool:
    """An error the activity said no retry can fix."""
    return isinstance(err.cause, ApplicationError) and err.cause.non_retryable
