"""`cloudburst convert`: Karpenter v1 NodePools and EC2NodeClasses as Cloudburst's (the mapping
is `cli/karpenter.py`'s; docs/migrating-from-karpenter.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import BaseModel, ValidationError
from rich.text import Text

from api import NodeClass, NodePool
from cli.connect import err_console, fail
from cli.karpenter import Conversion, ConvertOptions, convert, convertible, is_karpenter
from cli.manifests import read_documents, validation_problems
from cli.output import OutputFormat, print_data, write_lines

_MODELS: dict[str, type[BaseModel]] = {"NodePool": NodePool, "NodeClass": NodeClass}


def convert_command(
    files: Annotated[
        list[Path],
        typer.Option(
            "--filename",
            "-f",
            help="Karpenter manifests (karpenter.sh/v1 NodePool, karpenter.k8s.aws/v1 "
            "EC2NodeClass); `-` is standard input; repeat for several",
        ),
    ],
    namespace: Annotated[
        str,
        typer.Option(
            "--namespace",
            "-n",
            help="namespace of the converted objects (Cloudburst's are "
            "namespaced; Karpenter's are not)",
        ),
    ] = "default",
    aws_region: Annotated[
        str | None,
        typer.Option(help="the NodeClass's aws.region (an EC2NodeClass has none)"),
    ] = None,
    api_server: Annotated[
        str | None,
        typer.Option(help="the NodeClass's join.hostApiServer: where nodes join the cluster"),
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option(
            "--output",
            "-o",
            case_sensitive=False,
            help="yaml: the objects, to apply; json: the objects and every note, for scripts",
        ),
    ] = OutputFormat.YAML,
) -> None:
    """Convert Karpenter NodePools and EC2NodeClasses into Cloudburst NodePools and NodeClasses.

    Every field that does not convert as it is is listed on standard error (with -o json also
    under "notes"): not converted (and why), approximated, Karpenter's default written out, or
    a placeholder to fill in (REPLACE-ME). The converted objects are checked as `cloudburst
    validate` checks them. Exit 1 when a file cannot be read, nothing converts, or a converted
    object is refused."""
    if output not in (OutputFormat.YAML, OutputFormat.JSON):
        raise fail("-o: yaml or json")
    options = ConvertOptions(namespace=namespace, aws_region=aws_region, api_server=api_server)
    conversions: list[Conversion] = []
    failed = False
    for path in files:
        documents, problem = read_documents(path)
        if problem is not None:
            err_console.print(Text(f"error: {path}: {problem}"), highlight=False)
            failed = True
            continue
        for index, document in enumerate(documents, start=1):
            if document is None:
                continue
            source = _source(path, index, document)
            if isinstance(document, dict) and is_karpenter(document) and convertible(document):
                try:
                    conversions.append(convert(document, source, options))
                except (
                    Exception
                ) as err:  # a bug of ours: a broken document's verdict, not a traceback
                    why = f"could not be converted ({type(err).__name__}): {str(err)[:200]}"
                    err_console.print(Text(f"error: {source}: {why}"), highlight=False)
                    failed = True
            else:
                err_console.print(Text(f"skipped: {source}: {_why_skipped(document)}"))
    for conversion in conversions:
        for note in conversion.notes:
            err_console.print(Text(str(note)), highlight=False, soft_wrap=True)
    refused = [line for c in conversions for line in _refusals(c)]
    for line in refused:
        err_console.print(Text.assemble(("✗", "red"), f" {line}"), highlight=False, soft_wrap=True)
    if not conversions:
        err_console.print(
            Text(
                "error: nothing to convert: no karpenter.sh/v1 NodePool or "
                "karpenter.k8s.aws/v1 EC2NodeClass"
            )
        )
    objects = [c.converted for c in conversions]
    if output == OutputFormat.JSON:
        notes = [n.as_dict() for c in conversions for n in c.notes]
        print_data({"items": objects, "notes": notes}, output)
    elif objects:
        write_lines(["---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects).rstrip()])
    if failed or refused or not conversions:
        raise typer.Exit(1)


def _source(path: Path, index: int, document: Any) -> str:
    if not isinstance(document, dict):
        return f"{path}#{index}"
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return f"{path}#{index} ({document.get('apiVersion')} {document.get('kind')} {name})"


def _why_skipped(document: Any) -> str:
    if not isinstance(document, dict):
        return "not a mapping"
    if is_karpenter(document):
        return "a Karpenter object of no Cloudburst counterpart (NodePools and EC2NodeClasses of v1 convert)"
    return "not a Karpenter NodePool or EC2NodeClass"


def _refusals(conversion: Conversion) -> list[str]:
    """What `cloudburst validate` would say of the converted object."""
    converted = conversion.converted
    model = _MODELS[converted["kind"]]
    source = f"converted {converted['kind']} {converted['metadata'].get('name')}"
    try:
        model.model_validate(converted)
    except ValidationError as err:
        return [str(problem) for problem in validation_problems(source, err)]
    return []
