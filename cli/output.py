"""How the list, describe and show commands print: kubectl's `-o table|wide|json|yaml`.

- `table` / `wide` (more columns): borderless tables. On a terminal they fit its width. In a
  pipe or a file (stdout not a TTY) every value is printed whole, in aligned columns with no
  colour and no trailing blanks, so `grep`, `awk` and `cut` read what a person reads; rich
  would otherwise squeeze them into 80 columns and cut values short ("0.00…").
- `json` / `yaml`: the full objects, for scripts (`model_dump(mode="json", by_alias=True)`
  of the models each command names): a list command prints `{"items": [...]}`, a describe
  or show command one object. `--watch` prints one object per change instead (JSON Lines,
  or a YAML document each).
- User text (names, reasons, messages) is never rich markup nor emoji codes: "[/red]" or
  ":fire:" in a value prints as it is.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from pydantic import BaseModel
from rich.console import Console
from rich.table import Column, Table

# Wide enough that no value is ever cut: rich sizes a table to its content, not to this.
PIPE_WIDTH = 1_000_000


class OutputFormat(StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"

    @property
    def is_data(self) -> bool:
        return self in (OutputFormat.JSON, OutputFormat.YAML)


Output = Annotated[
    OutputFormat,
    typer.Option(
        "--output",
        "-o",
        case_sensitive=False,
        help="table, wide (more columns), or json / yaml (the full objects, for scripts)",
    ),
]


def is_tty() -> bool:
    return sys.stdout.isatty()


def stdout_console() -> Console:
    """The console of a command's output: the terminal's width, or unbounded in a pipe.

    Asked for at print time, not import time: stdout may have been replaced since (tests).
    """
    width = None if is_tty() else PIPE_WIDTH
    return Console(markup=False, emoji=False, highlight=False, width=width)


def new_table(*headers: str | Column, title: str | None = None) -> Table:
    """A kubectl-style table: no borders, headers in capitals, the title (if any) on the left."""
    return Table(*headers, box=None, title=title, title_justify="left", pad_edge=False)


def print_table(table: Table) -> None:
    console = stdout_console()
    if is_tty():
        console.print(table)
        return
    # rich pads every cell to its column, the last one too: trailing blanks help no script.
    with console.capture() as captured:
        console.print(table)
    write_lines(line.rstrip() for line in captured.get().splitlines())


class TableStream:
    """Rows printed as they come (`--watch` in a pipe): the header once, then each batch at
    once. Columns only widen, so rows stay aligned under the header as long as they can."""

    def __init__(self, headers: list[str]) -> None:
        self._headers = headers
        self._widths = [len(header) for header in headers]
        self._started = False

    def print(self, rows: list[list[str]]) -> None:
        if self._started and not rows:
            return
        for row in rows:
            self._widths = [max(w, len(cell)) for w, cell in zip(self._widths, row, strict=True)]
        columns = [Column(h, min_width=w) for h, w in zip(self._headers, self._widths, strict=True)]
        table = new_table(*columns)
        table.show_header = not self._started
        for row in rows:
            table.add_row(*row)
        print_table(table)
        self._started = True


def print_data(data: Any, output: OutputFormat) -> None:
    """One JSON or YAML document on stdout."""
    if output == OutputFormat.JSON:
        write_lines([json.dumps(data, indent=2, ensure_ascii=False)])
    else:
        write_lines([yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip("\n")])


def stream_data(data: Any, output: OutputFormat) -> None:
    """One object of a stream (`--watch`): a JSON line, or a YAML document after `---`."""
    if output == OutputFormat.JSON:
        write_lines([json.dumps(data, ensure_ascii=False, separators=(",", ":"))])
    else:
        print_data(data, output)
        write_lines(["---"])


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True)


def items(models: Iterable[BaseModel]) -> dict[str, Any]:
    return {"items": [dump(model) for model in models]}


def write_lines(lines: Iterable[str]) -> None:
    """Lines on stdout, flushed at once: a reader at the other end of a pipe sees each one
    when it is written. A reader that went away (`| head`) ends the command quietly."""
    try:
        for line in lines:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the broken pipe again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


def age(elapsed: timedelta) -> str:
    """kubectl's AGE: the largest whole unit (3d, 5h, 12m, 40s)."""
    seconds = max(0, int(elapsed.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
