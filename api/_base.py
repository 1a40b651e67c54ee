"""Shared base for resource models: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from api.limits import (
    MAX_NAME_LENGTH,
    SECRET_KEY_PATTERN,
    NamespaceName,
    ObjectName,
)


class CamelModel(BaseModel):
    """A Kubernetes-style object part: camelCase fields, unknown fields refused.

    Refusing unknown fields is what turns a typo in a manifest (`maxNode:`) into an error
    naming the field instead of a silently ignored setting.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        serialize_by_alias=True,
    )


class SecretKeyRef(CamelModel):
    """A key of a Secret in the referencing object's own namespace; the value is read inside
    an activity, never passed through Temporal."""

    name: ObjectName
    key: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=SECRET_KEY_PATTERN)
    # Accepted for manifests that spell it out, with that same namespace only: a namespace is
    # a trust boundary, and a NodeClass that could name another namespace's Secret would let
    # whoever may edit it read that Secret (NodeClass refuses any other value).
    namespace: NamespaceName | None = Field(
        default=None,
        description="Only the referencing object's own namespace (or unset): a Secret is "
        "never read across namespaces.",
    )


# A Kubernetes status condition, as NodeClaims and NodePools report them.
class Condition(CamelModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime


class OwnerReference(CamelModel):
    """An object's owner: the garbage collector deletes the object once its owner is gone
    (the owner's uid, not its name: an owner created again under the name owns nothing)."""

    model_config = ConfigDict(extra="allow")

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(CamelModel):
    """The part of Kubernetes metadata we read; the rest is kept but ignored.

    Name and namespace are checked as the API server checks them, so that `cloudburst
    validate` refuses offline what `kubectl apply` would refuse.
    """

    model_config = ConfigDict(extra="allow")

    name: ObjectName
    namespace: NamespaceName = "default"
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    owner_references: list[OwnerReference] = []
