"""Loading NodePool/NodeClass/NodeClaim manifests with errors a user can act on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from api import NodeClaim, NodeClass, NodePool

KINDS: dict[str, type[BaseModel]] = {
    "NodePool": NodePool,
    "NodeClass": NodeClass,
    "NodeClaim": NodeClaim,
}
GROUP_VERSION = "cloudburst.io/v1alpha1"


@dataclass
class Problem:
    source: str  # "file.yaml#2 (NodePool dr-nodepool)"
    path: str  # "spec.limits.maxNodes"
    message: str

    def __str__(self) -> str:
        where = f" {self.path}:" if self.path else ""
        return f"{self.source}:{where} {self.message}"


@dataclass
class Loaded:
    resources: list[BaseModel]
    problems: list[Problem]
    skipped: int  # documents of other kinds (Deployments, Secrets, ...)


def load_manifests(path: Path) -> Loaded:
    """Every cloudburst.io document of a YAML file, validated; other kinds are skipped."""
    resources: list[BaseModel] = []
    problems: list[Problem] = []
    skipped = 0
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except OSError as err:
        return Loaded([], [Problem(str(path), "", f"cannot read: {err.strerror}")], 0)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        return Loaded([], [Problem(str(path), "", f"invalid YAML: {where}{problem}")], 0)
    for index, document in enumerate(documents, start=1):
        if document is None:
            continue
        source = f"{path}#{index}"
        if not isinstance(document, dict):
            problems.append(Problem(source, "", "document is not a mapping"))
            continue
        kind = document.get("kind")
        api_version = document.get("apiVersion")
        if kind not in KINDS or api_version != GROUP_VERSION:
            if isinstance(api_version, str) and api_version.startswith("cloudburst.io/"):
                problems.append(
                    Problem(
                        source,
                        "apiVersion/kind",
                        f"unknown {api_version} kind {kind!r}; expected "
                        f"{GROUP_VERSION} {', '.join(KINDS)}",
                    )
                )
            else:
                skipped += 1
            continue
        name = _name_of(document)
        source = f"{source} ({kind} {name})"
        try:
            resources.append(KINDS[kind].model_validate(document))
        except ValidationError as err:
            problems.extend(validation_problems(source, err))
    return Loaded(resources, problems, skipped)


def validation_problems(source: str, err: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for error in err.errors():
        path = ".".join(str(part) for part in error["loc"] if not _is_union_tag(part))
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; fields are camelCase)"
        elif error["type"] == "missing":
            message = "required field is missing"
        elif "input" in error and error["type"] not in ("model_type", "dict_type"):
            message = f"{message} (got {error['input']!r})"
        if problems and problems[-1].path == path and problems[-1].source == source:
            # One value failing every member of a union: one line, all the options.
            problems[-1].message += f"; or {message}"
            continue
        problems.append(Problem(source, path, message))
    return problems


def _is_union_tag(part: Any) -> bool:
    # pydantic names union members in the location ("str", "list[str]"); users never see those.
    return isinstance(part, str) and (part in ("str", "int", "float") or "[" in part)


def _name_of(document: dict[str, Any]) -> str:
    metadata = document.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
        return str(metadata["name"])
    return "<no name>"
