"""The CustomResourceDefinitions the emulator enforces: the ones `cloudburst crds` generates.

They are read from `sim/kubeapi/crds/`, a symbolic link to the repository's `deploy/base/crds`
(one copy, which tests/deploy keeps in step with the models in api/); an editable install reads
them through it, and the simulator's wheel packages the files behind it (its pyproject's
package-data). A source tree without the link falls back to `deploy/base/crds` of the
repository around `simulator/`. Parsed once, on the first custom-resource write.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import yaml

from sim.kubeapi.schema import StructuralSchema

log = logging.getLogger(__name__)

_HERE = Path(__file__).resolve().parent
SEARCH_PATH = (Path(__file__).parent / "crds", _HERE.parents[2] / "deploy" / "base" / "crds")


class CrdSchemas:
    """(group, version, plural) -> the compiled schema of that CRD version."""

    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._schemas: dict[tuple[str, str, str], StructuralSchema] | None = None

    def get(self, group: str, version: str, plural: str) -> StructuralSchema | None:
        return self._load().get((group, version, plural))

    def all(self) -> dict[tuple[str, str, str], StructuralSchema]:
        return dict(self._load())

    def _load(self) -> dict[tuple[str, str, str], StructuralSchema]:
        if self._schemas is not None:
            return self._schemas
        with self._lock:
            if self._schemas is None:
                self._schemas = _read(self._directory or _find())
        return self._schemas


def _find() -> Path | None:
    for candidate in SEARCH_PATH:
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    return None


def _read(directory: Path | None) -> dict[tuple[str, str, str], StructuralSchema]:
    if directory is None:
        log.warning(
            "no CRDs found (looked in %s): custom resources are stored without validation",
            ", ".join(map(str, SEARCH_PATH)),
        )
        return {}
    schemas: dict[tuple[str, str, str], StructuralSchema] = {}
    for path in sorted(directory.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
                continue
            spec: dict[str, Any] = document.get("spec") or {}
            group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
            for version in spec.get("versions") or []:
                schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or None
                if schema is not None:
                    schemas[(group, version["name"], plural)] = StructuralSchema(schema)
    log.debug("CRD schemas from %s: %s", directory, sorted(schemas))
    return schemas


_documents: list[dict[str, Any]] | None = None
_documents_lock = threading.Lock()


def crd_documents() -> list[dict[str, Any]]:
    """The CustomResourceDefinition documents themselves (read once per process): what
    `kubectl get crds` lists, and where discovery and tables find names and printer columns."""
    global _documents
    if _documents is None:
        with _documents_lock:
            if _documents is None:
                directory = _find()
                found: list[dict[str, Any]] = []
                for path in sorted(directory.glob("*.yaml")) if directory else []:
                    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
                    for document in yaml.load_all(path.read_text(), Loader=loader):
                        if (
                            isinstance(document, dict)
                            and document.get("kind") == "CustomResourceDefinition"
                        ):
                            found.append(document)
                _documents = found
    return _documents


def printer_columns(group: str, version: str, plural: str) -> list[dict[str, Any]]:
    """A served custom resource's additionalPrinterColumns (empty when its CRD has none)."""
    for document in crd_documents():
        spec = document.get("spec") or {}
        if spec.get("group") != group or (spec.get("names") or {}).get("plural") != plural:
            continue
        for v in spec.get("versions") or []:
            if v.get("name") == version:
                return list(v.get("additionalPrinterColumns") or [])
    return []
