"""API errors rendered as `v1 Status` objects, with the reasons and messages of a real server."""

from __future__ import annotations

from typing import Any

from sim.kubeapi.resources import ResourceType


class ApiError(Exception):
    """An error answer: HTTP code plus the Status body's reason, message and details."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.reason, self.message, self.details, failure=True)


def status_body(
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None = None,
    failure: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if failure else "Success",
        "code": code,
    }
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    return body


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    return {"name": name, "group": rt.group, "kind": rt.plural}


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.key} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.key} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    msg = f'Operation cannot be fulfilled on {rt.key} "{name}": {why}'
    return ApiError(409, "Conflict", msg, _details(rt, name))


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid(rt: ResourceType, name: str, field: str, problem: str) -> ApiError:
    details = _details(rt, name) | {
        "kind": rt.kind,
        "causes": [{"reason": "FieldValueInvalid", "message": problem, "field": field}],
    }
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {field}: {problem}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")
