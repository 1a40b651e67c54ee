"""Loading NodePool/NodeClass/NodeClaim manifests with errors a user can act on.

Whatever a file holds (bytes that are not UTF-8, a YAML bomb, a 5,000-digit number, a `kind`
that is a list), loading returns problems, never raises: each names the file, the document's
index and the field.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode

from api import NodeClaim, NodeClass, NodePool
from api.nodepool import API_VERSION
from api.problems import field_errors, printable, shown

KINDS: dict[str, type[BaseModel]] = {
    "NodePool": NodePool,
    "NodeClass": NodeClass,
    "NodeClaim": NodeClaim,
}
GROUP = "cloudburst.io"
GROUP_VERSION = API_VERSION
# The API server refuses requests over 3 MiB; a manifest is far smaller.
MAX_FILE_BYTES = 3 * 2**20
# Nesting and size after aliases are expanded: a few anchors must not make a billion nodes
# ("billion laughs"), nor deep nesting exhaust the interpreter's stack.
MAX_DEPTH = 64
MAX_EXPANDED_NODES = 100_000
# Integers past int64 are refused by the API server; past this many digits Python cannot even
# print them (`sys.get_int_max_str_digits`), so they are kept as a placeholder.
MAX_INT_DIGITS = 40
# Where a problem is about the whole document or file rather than a field.
DOCUMENT = "(document)"
# The file name that is standard input.
STDIN = "-"
FILE = "(file)"
_API_VERSION = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?v[0-9]+((alpha|beta)[0-9]+)?$")


@dataclass
class Problem:
    source: str  # "file.yaml#2 (NodePool dr-nodepool)"
    path: str  # "spec.limits.maxNodes", or DOCUMENT / FILE
    message: str

    def __str__(self) -> str:
        where = f" {self.path}:" if self.path else ""
        return f"{self.source}:{where} {self.message}"


@dataclass(frozen=True)
class Other:
    """A document of another group: not ours to check (a Deployment, Karpenter's NodePool)."""

    source: str  # "file.yaml#3"
    api_version: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.api_version} {self.kind} {self.name}"


@dataclass
class Loaded:
    resources: list[BaseModel]
    problems: list[Problem]
    others: list[Other] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        """Documents of other groups (Deployments, Secrets, Karpenter's, ...)."""
        return len(self.others)


def load_manifests(path: Path) -> Loaded:
    """Every cloudburst.io document of a YAML file (`-`: standard input), validated; documents
    of other groups are listed, not checked."""
    documents, problem = read_documents(path)
    if problem is not None:
        return Loaded([], [Problem(str(path), FILE, problem)])
    present = [(index, d) for index, d in enumerate(documents, start=1) if d is not None]
    if not present:
        return Loaded([], [Problem(str(path), FILE, "no documents (the file is empty)")])
    resources: list[BaseModel] = []
    problems: list[Problem] = []
    others: list[Other] = []
    for index, document in present:
        source = f"{path}#{index}"
        model, found = _our_model(source, document)
        problems.extend(found)
        if model is None:
            if not found:
                assert isinstance(document, dict)
                others.append(_other(source, document))
            continue
        assert isinstance(document, dict)
        source = f"{source} ({document['kind']} {_name_of(document)})"
        try:
            resources.append(model.model_validate(document))
        except ValidationError as err:
            problems.extend(validation_problems(source, err))
        except RecursionError:
            problems.append(Problem(source, DOCUMENT, f"nested deeper than {MAX_DEPTH} levels"))
    return Loaded(resources, problems, others)


def validation_problems(source: str, err: ValidationError) -> list[Problem]:
    return [Problem(source, path or DOCUMENT, message) for path, message in field_errors(err)]


# --- reading -------------------------------------------------------------------------------


def read_documents(path: Path) -> tuple[list[Any], str | None]:
    """The file's YAML documents, or why there are none. `-` is standard input, as kubectl's
    `-f -` (a file named `-` is `./-`)."""
    try:
        if str(path) == STDIN:
            raw = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with path.open("rb") as file:
                raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        return [], f"cannot read: {err.strerror or err}"
    if len(raw) > MAX_FILE_BYTES:
        return [], f"larger than {MAX_FILE_BYTES // 2**20} MiB; a manifest is far smaller"
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        return [], f"not UTF-8 text: byte 0x{raw[err.start]:02x} on line {line}"
    try:
        documents = list(yaml.load_all(text, Loader=_BoundedLoader))
        _check_expanded_size(documents)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        return [], f"invalid YAML: {where}{problem}"
    except _TooLarge as err:
        return [], str(err)
    except RecursionError:
        return [], f"invalid YAML: nested deeper than {MAX_DEPTH} levels"
    return documents, None


class _TooLarge(Exception):
    pass


class _OversizedInt:
    """An integer with too many digits to be anything but a mistake; models refuse it."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"<an integer of {self.digits} digits>"


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a nesting limit, refusing duplicate keys (as kubectl does)
    and keeping integers past MAX_INT_DIGITS digits as a placeholder."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ConstructorError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: set[object] = set()
            for key_node, _ in node.value:
                if isinstance(key_node, ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    if key_node.value in seen:
                        raise ConstructorError(
                            None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                        )
                    seen.add(key_node.value)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: Node) -> Any:
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            return _OversizedInt(digits)
        return super().construct_yaml_int(node)  # type: ignore[arg-type]


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


def _check_expanded_size(documents: list[Any]) -> None:
    """Count nodes as if every alias were copied out; refuse a bomb or a cycle."""
    sizes: dict[int, int] = {}
    total = 0
    for document in documents:
        total += _expanded(document, sizes, set())
        if total > MAX_EXPANDED_NODES:
            raise _TooLarge(
                f"expands to more than {MAX_EXPANDED_NODES} values (aliases copied out): "
                "a YAML bomb, or far too large for a manifest"
            )


def _expanded(value: Any, sizes: dict[int, int], open_: set[int]) -> int:
    if not isinstance(value, dict | list):
        return 1
    key = id(value)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise _TooLarge("an alias refers to the node that contains it (a cycle)")
    open_.add(key)
    children = value.values() if isinstance(value, dict) else value
    size = 1
    for child in children:
        size += _expanded(child, sizes, open_)
        if size > MAX_EXPANDED_NODES:
            break
    open_.discard(key)
    sizes[key] = size
    return size


# --- which model ---------------------------------------------------------------------------


def _our_model(source: str, document: Any) -> tuple[type[BaseModel] | None, list[Problem]]:
    """The model of a cloudburst.io document; problems if it is broken; neither if not ours."""
    if not isinstance(document, dict):
        what = "a list" if isinstance(document, list) else f"a {type(document).__name__}"
        return None, [Problem(source, DOCUMENT, f"document is {what}, not a mapping")]
    problems = []
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if not isinstance(api_version, str) or not _API_VERSION.match(api_version):
        got = "missing" if "apiVersion" not in document else f"got {shown(api_version)}"
        expected = f"a group/version string such as {GROUP_VERSION!r}"
        problems.append(Problem(source, "apiVersion", f"must be {expected} ({got})"))
    if not isinstance(kind, str) or not kind:
        got = "missing" if "kind" not in document else f"got {shown(kind)}"
        problems.append(Problem(source, "kind", f"must be a kind such as 'NodePool' ({got})"))
    if problems or not isinstance(api_version, str):
        return None, problems
    if api_version.split("/")[0] != GROUP:
        return None, []  # another group's object (a Deployment, Karpenter's NodePool, ...)
    if api_version != GROUP_VERSION or kind not in KINDS:
        message = (
            f"unknown {shown(api_version)} kind {shown(kind)}; expected "
            f"{GROUP_VERSION} {', '.join(KINDS)}"
        )
        return None, [Problem(source, "apiVersion/kind", message)]
    return KINDS[kind], []


def _other(source: str, document: dict[str, Any]) -> Other:
    kind = document.get("kind")
    return Other(
        source, printable(str(document["apiVersion"])), printable(str(kind)), _name_of(document)
    )


def _name_of(document: dict[str, Any]) -> str:
    metadata = document.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
        return printable(metadata["name"])
    return "<no name>"
