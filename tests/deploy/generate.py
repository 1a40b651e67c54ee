"""What is generated from the chart and the settings, and written by `python -m
tests.deploy.generate` (tests/deploy/test_chart.py fails while a committed copy differs):

- deploy/chart/values.schema.json: the chart's values, with `settings` built from the settings
  models themselves (worker/settings.py `Settings`, activities/planning/config.py
  `PriceSettings`), so that every setting's name, type, bounds and doc are the processes' own
  and a value they would refuse fails at `helm install`;
- deploy/chart/README.md's settings reference, from the same models;
- deploy/base/*.yaml: the chart rendered by `helm template` with deploy/base/values.yaml, the
  kustomize base the overlays build on (deploy/README.md "One source of truth"), and
  deploy/components/split-workers/pool-worker.yaml, the same with poolWorker.enabled.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from activities.planning.config import REAL_PROVIDERS, PriceSettings
from worker.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "chart"
SCHEMA = CHART / "values.schema.json"
CHART_README = CHART / "README.md"
BASE = ROOT / "deploy" / "base"
BASE_VALUES = BASE / "values.yaml"
POOL_WORKER = ROOT / "deploy" / "components" / "split-workers" / "pool-worker.yaml"
RELEASE_NAME = "cloudburst"
RELEASE_NAMESPACE = "cloudburst-system"
# The chart's templates whose output is a file of the base, by name.
BASE_FILES = (
    "rbac.yaml",
    "join.yaml",
    "csr-approver.yaml",
    "config.yaml",
    "worker.yaml",
    "trigger.yaml",
    "network-policies.yaml",
)
GENERATED = "# Generated from deploy/chart by `python -m tests.deploy.generate`: do not edit.\n"
# Settings the chart never takes from `settings`, and why.
NOT_IN_CHART: dict[str, str] = {
    "temporal_api_key": "a credential: the Secret temporal.secretName, as temporalApiKeyFile",
    "kubeconfig": "the pods use their ServiceAccount's token",
    "worker_namespace": "the release's namespace, where its Roles are",
    "trigger_id": "each trigger pod's own name (its Lease)",
    "codec_token_file": "the codec server is not part of the chart",
    "worker_queues": "each worker Deployment's own: poolWorker.enabled sets it",
}
REQUIRED = ["clusterId"]
SETTINGS_DOC = (
    "Settings of the worker and the trigger (worker/settings.py), each the setting's name in "
    "camelCase; `prices` the live-price ones (activities/planning/config.py). Into the "
    "ConfigMap cloudburst-config; unset ones keep the processes' defaults."
)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def chart_settings(model: type[BaseModel], skip: dict[str, str]) -> dict[str, FieldInfo]:
    return {camel(name): field for name, field in model.model_fields.items() if name not in skip}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {
            key: _inline(value, defs)
            for key, value in node.items()
            if key not in ("title", "format")
        }
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node


def settings_properties(model: type[BaseModel], skip: dict[str, str]) -> dict[str, Any]:
    """Each setting's JSON schema as pydantic gives it (type, bounds, pattern, enum, doc),
    under its camelCase name."""
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})
    properties: dict[str, Any] = {}
    for name in model.model_fields:
        if name in skip:
            continue
        prop = _inline(copy.deepcopy(schema["properties"][name]), defs)
        prop.pop("default", None)  # the process's default applies when the chart sets none
        properties[camel(name)] = prop
    return properties


def values_schema() -> dict[str, Any]:
    settings = settings_properties(Settings, NOT_IN_CHART)
    prices = settings_properties(PriceSettings, {})
    # PriceSettings' own validator, which pydantic's schema cannot say: known providers only.
    prices["providers"]["items"]["enum"] = REAL_PROVIDERS
    prices["endpoints"]["propertyNames"] = {"enum": REAL_PROVIDERS}
    settings["prices"] = {
        "type": "object",
        "description": "Live prices (CLOUDBURST_PRICES_*, activities/planning/config.py).",
        "additionalProperties": False,
        "properties": prices,
    }
    schema = json.loads((CHART / "values.schema.base.json").read_text())
    schema["properties"]["settings"] = {
        "type": "object",
        "description": SETTINGS_DOC,
        "additionalProperties": False,
        "required": REQUIRED,
        "properties": settings,
    }
    return schema


def _type_of(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return " \\| ".join(f"`{value}`" for value in prop["enum"])
    if "anyOf" in prop:
        return " or ".join(_type_of(p) for p in prop["anyOf"] if p.get("type") != "null")
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type_of(prop.get('items', {}))}"
    if kind == "object":
        return "map"
    return str(kind)


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if hasattr(value, "value"):  # an enum
        value = value.value
    return f"`{json.dumps(value)}`".replace("|", "\\|")


def settings_reference() -> str:
    """The settings reference of deploy/chart/README.md: every setting the chart takes."""
    lines = [
        "| setting | environment | type | default | what it does |",
        "| --- | --- | --- | --- | --- |",
    ]
    defaults = {camel(n): f.default for n, f in Settings.model_fields.items()} | {
        f"prices.{camel(n)}": f.default for n, f in PriceSettings.model_fields.items()
    }
    rows = [
        (name, f"CLOUDBURST_{name_snake.upper()}", prop)
        for name_snake, (name, prop) in zip(
            [n for n in Settings.model_fields if n not in NOT_IN_CHART],
            settings_properties(Settings, NOT_IN_CHART).items(),
            strict=True,
        )
    ]
    rows += [
        (f"prices.{name}", f"CLOUDBURST_PRICES_{name_snake.upper()}", prop)
        for name_snake, (name, prop) in zip(
            list(PriceSettings.model_fields),
            settings_properties(PriceSettings, {}).items(),
            strict=True,
        )
    ]
    for name, env, prop in rows:
        required = " **Required.**" if name in REQUIRED else ""
        doc = prop.get("description", "").replace("|", "\\|").replace("\n", " ")
        default = "" if name in REQUIRED else _default(defaults[name])
        lines.append(f"| `{name}` | `{env}` | {_type_of(prop)} | {default} | {doc}{required} |")
    lines.append("")
    lines.append("Not taken from `settings`, and why:")
    lines.append("")
    for name, why in NOT_IN_CHART.items():
        lines.append(f"- `{camel(name)}`: {why}.")
    return "\n".join(lines) + "\n"


README_BEGIN = "<!-- settings reference: generated by `python -m tests.deploy.generate` -->\n"
README_END = "<!-- end of the settings reference -->\n"


def chart_readme(current: str) -> str:
    before, _, rest = current.partition(README_BEGIN)
    _, _, after = rest.partition(README_END)
    return before + README_BEGIN + settings_reference() + README_END + after


def helm_template(helm: Path, *args: str) -> str:
    done = subprocess.run(
        [str(helm), "template", RELEASE_NAME, str(CHART), "--namespace", RELEASE_NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm template failed:\n{done.stderr}")
    return done.stdout


def base_files(helm: Path) -> dict[str, str]:
    """The base's files: each chart template's output, as `helm template` renders it with
    deploy/base/values.yaml, less the ConfigMap's cluster id, which every overlay sets
    (no placeholder: an overlay that forgets it fails to build, deploy/README.md)."""
    rendered = helm_template(helm, "--values", str(BASE_VALUES))
    by_template: dict[str, list[str]] = {}
    for document in re.split(r"^---\n", rendered, flags=re.M):
        source = re.match(r"# Source: [^/]+/templates/(\S+)\n", document)
        if source is None:
            continue
        by_template.setdefault(source.group(1), []).append(document[source.end() :])
    files: dict[str, str] = {}
    for name in BASE_FILES:
        documents = by_template.pop(name)
        if name == "config.yaml":
            documents = [
                re.sub(r"^  CLOUDBURST_CLUSTER_ID: .*\n", "", doc, flags=re.M) for doc in documents
            ]
        files[name] = GENERATED + "---\n".join(doc.strip("\n") + "\n" for doc in documents)
    assert not by_template, f"templates the base lacks: {sorted(by_template)}"
    return files


def pool_worker_file(helm: Path) -> str:
    """components/split-workers' Deployment: the chart's pool-worker.yaml template, rendered
    with deploy/base/values.yaml and poolWorker.enabled."""
    rendered = helm_template(
        helm,
        "--values",
        str(BASE_VALUES),
        "--set",
        "poolWorker.enabled=true",
        "--show-only",
        "templates/pool-worker.yaml",
    )
    documents = [
        re.sub(r"^# Source: \S+\n", "", document)
        for document in re.split(r"^---\n", rendered, flags=re.M)
        if document.strip()
    ]
    return GENERATED + "---\n".join(doc.strip("\n") + "\n" for doc in documents)


def main() -> None:
    from sim.helm import helm_binary

    SCHEMA.write_text(json.dumps(values_schema(), indent=2) + "\n")
    CHART_README.write_text(chart_readme(CHART_README.read_text()))
    helm = helm_binary()
    for name, text in base_files(helm).items():
        (BASE / name).write_text(text)
    POOL_WORKER.write_text(pool_worker_file(helm))
    print(f"wrote {SCHEMA.relative_to(ROOT)}, {CHART_README.relative_to(ROOT)} and deploy/base")


if __name__ == "__main__":
    main()
