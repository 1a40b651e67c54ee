"""The Secrets a NodeClass (or the worker's own settings) names: read, decoded, refused when
a reference leaves the namespace of the object holding it.

Activities raise these functions' failures to Temporal as they come (`ApplicationError` of
`api/errors.py`'s types); `cloudburst plan` runs the same reads, and Temporal's SDK is loaded
only when one fails (`application_error`).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING

from kubernetes.client.exceptions import ApiException

from activities.kube_reads import SecretReader
from api._base import SecretKeyRef
from api.errors import INVALID_CONFIGURATION, application_error, kube_api_error
from api.nodeclass import ProviderBlock, RedfishClass

if TYPE_CHECKING:
    from temporalio.exceptions import ApplicationError


def read_secret_value(core: SecretReader, namespace: str, ref: SecretKeyRef) -> str:
    """The value of one key of a Secret in `namespace`, decoded.

    `namespace` is the namespace of the object holding the reference (a claim's, whose
    NodeClass lives there); a reference naming another namespace is refused before any read
    (the model refuses it too: this is the second line). A missing Secret or key is a
    configuration error nobody can retry away: it is raised as non-retryable
    `InvalidConfiguration`, naming the Secret and key (never a value).
    """
    if ref.namespace not in (None, namespace):
        raise application_error(
            f"the reference to Secret {ref.namespace}/{ref.name} leaves namespace {namespace}: "
            f"a NodeClass may only reference Secrets in its own namespace (remove `namespace` "
            f"from the reference and keep the Secret in {namespace})",
            type=INVALID_CONFIGURATION,
            non_retryable=True,
        )
    ns = namespace
    try:
        secret = core.read_namespaced_secret(ref.name, ns)
    except ApiException as err:
        if err.status == 404:
            raise application_error(
                f"Secret {ns}/{ref.name} not found (referenced for key {ref.key!r})",
                type=INVALID_CONFIGURATION,
                non_retryable=True,
            ) from None
        raise _sanitized(err, f"reading Secret {ns}/{ref.name}") from None
    data = secret.data or {}
    if ref.key in data and data[ref.key] is not None:
        try:
            return base64.b64decode(data[ref.key]).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise application_error(
                f"Secret {ns}/{ref.name} key {ref.key!r} is not valid base64 UTF-8 text",
                type=INVALID_CONFIGURATION,
                non_retryable=True,
            ) from None
    raise application_error(
        f"Secret {ns}/{ref.name} has no key {ref.key!r}",
        type=INVALID_CONFIGURATION,
        non_retryable=True,
    )


def read_provider_credential(
    core: SecretReader, namespace: str, block: ProviderBlock
) -> str | None:
    """The one credential string a provider module is built with, read in `namespace`.

    A block with one credential Secret gives its value (None without one); a Redfish
    inventory, whose BMC logins are per machine, gives a JSON object of machine name to that
    machine's value (activities/providers/redfish.py reads it so).
    """
    if isinstance(block, RedfishClass):
        return json.dumps(
            {
                name: read_secret_value(core, namespace, ref)
                for name, ref in block.machine_credential_refs()
            }
        )
    ref = block.credential_ref()
    return read_secret_value(core, namespace, ref) if ref else None


def _sanitized(err: ApiException, what: str) -> ApplicationError:
    """A retryable error that keeps the status but drops the response body.

    Used around calls that touch Secrets: a body could echo what was sent.
    """
    return application_error(
        f"{what} failed: HTTP {err.status} {err.reason or ''}".strip(),
        type=kube_api_error(err.status),
    )
