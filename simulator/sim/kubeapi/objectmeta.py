"""What the API server checks of every object's metadata, and of a label or a label key
wherever one is written (k8s.io/apimachinery/pkg/util/validation, ValidateObjectMeta).

Label keys and values, annotation keys and owner references are refused with the server's
own messages: a typo in a manifest's labels is a 422 naming the field at `kubectl apply`,
not a label stored that no selector can ever match.
"""

from __future__ import annotations

import re
from typing import Any

from sim.kubeapi.errors import FieldError

_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_QUALIFIED_NAME_MAX = 63
_LABEL_VALUE_FMT = f"({_QUALIFIED_NAME_FMT})?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
LABEL_VALUE_MAX = 63
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = f"{_DNS1123_LABEL_FMT}(\\.{_DNS1123_LABEL_FMT})*"
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
DNS1123_SUBDOMAIN_MAX = 253

_QUALIFIED_NAME = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT)
_DNS1123_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_FMT)


def regex_error(message: str, fmt: str, *examples: str) -> str:
    """validation.RegexError, spacing and all (`'MyName',  or 'my.name'`)."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def dns1123_subdomain_problems(value: str) -> list[str]:
    """IsDNS1123Subdomain: an object's name, a label key's prefix."""
    problems = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        problems.append(max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        problems.append(regex_error(_DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return problems


def qualified_name_problems(value: str) -> list[str]:
    """IsQualifiedName: a label key, an annotation key (lowercased first)."""
    examples = ("MyName", "my.name", "123-abc")
    parts = value.split("/")
    problems: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            problems += [f"prefix part {p}" for p in dns1123_subdomain_problems(prefix)]
    else:
        return [
            "a qualified name "
            + regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, *examples)
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > _QUALIFIED_NAME_MAX:
        problems.append(f"name part {max_len_error(_QUALIFIED_NAME_MAX)}")
    if not _QUALIFIED_NAME.fullmatch(name):
        problems.append(
            f"name part {regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, *examples)}"
        )
    return problems


def label_value_problems(value: str) -> list[str]:
    """IsValidLabelValue."""
    problems = []
    if len(value) > LABEL_VALUE_MAX:
        problems.append(max_len_error(LABEL_VALUE_MAX))
    if not _LABEL_VALUE.fullmatch(value):
        problems.append(
            regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return problems


def label_errors(labels: Any, path: str) -> list[FieldError]:
    """ValidateLabels: each key a qualified name, each value a label value."""
    if not isinstance(labels, dict):
        return []
    errors: list[FieldError] = []
    for key, value in labels.items():
        errors += label_key_errors(str(key), path)
        if isinstance(value, str):
            errors += [FieldError.invalid(path, value, p) for p in label_value_problems(value)]
    return errors


def label_key_errors(key: str, path: str) -> list[FieldError]:
    """ValidateLabelName."""
    return [FieldError.invalid(path, key, problem) for problem in qualified_name_problems(key)]


def annotation_errors(annotations: Any, path: str) -> list[FieldError]:
    """ValidateAnnotations' keys: a qualified name, whatever its case."""
    if not isinstance(annotations, dict):
        return []
    return [
        FieldError.invalid(path, str(key), problem)
        for key in annotations
        for problem in qualified_name_problems(str(key).lower())
    ]


def owner_reference_errors(references: Any, path: str) -> list[FieldError]:
    """ValidateOwnerReferences: each names its owner's version, kind, name and uid; one
    controller at most."""
    if not isinstance(references, list):
        return []
    errors: list[FieldError] = []
    controller = ""
    for reference in references:
        if not isinstance(reference, dict):
            continue
        api_version = str(reference.get("apiVersion") or "")
        for field, given, missing, message in (
            ("apiVersion", api_version, not _version_of(api_version), "version must not be empty"),
            ("kind", reference.get("kind"), not reference.get("kind"), "kind must not be empty"),
            ("name", reference.get("name"), not reference.get("name"), "name must not be empty"),
            ("uid", reference.get("uid"), not reference.get("uid"), "uid must not be empty"),
        ):
            if missing:
                errors.append(FieldError.invalid(f"{path}.{field}", str(given or ""), message))
        if reference.get("controller") is True:
            this = f"{reference.get('kind', '')}/{reference.get('name', '')}"
            if controller:
                errors.append(
                    FieldError.invalid(
                        path,
                        references,
                        "Only one reference can have Controller set to true. Found "
                        f'"true" in references for {controller} and {this}',
                    )
                )
            else:
                controller = this
    return errors


def _version_of(api_version: str) -> str:
    """schema.ParseGroupVersion's version: "" for "", "apps/" or "a/b/c"."""
    parts = api_version.split("/")
    if len(parts) > 2:
        return ""
    return parts[-1]


def object_meta_errors(metadata: Any, path: str = "metadata") -> list[FieldError]:
    """Labels, annotations and owner references of an object being written (create or
    update alike), in the order ValidateObjectMetaAccessor checks them."""
    if not isinstance(metadata, dict):
        return []
    return (
        label_errors(metadata.get("labels"), f"{path}.labels")
        + annotation_errors(metadata.get("annotations"), f"{path}.annotations")
        + owner_reference_errors(metadata.get("ownerReferences"), f"{path}.ownerReferences")
    )
