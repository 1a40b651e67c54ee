"""docs/configuration.md is what `cloudburst config-reference` generates from the settings
classes, and the generator covers every settings class and the variables CloudBroker's
settings are really read from."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from activities.planning.config import PlanningConfig
from cli.commands.config_reference import (
    CLOUDBROKER_VARIABLES,
    SOURCES,
    config_reference_markdown,
)
from cli.main import app

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "configuration.md"
# A value for each CloudBroker variable that `from_env` reads into something not the default.
CLOUDBROKER_SAMPLES = {
    "CLOUDBURST_CLOUDBROKER_URL": "https://cloudbroker.example",
    "CLOUDBURST_CLOUDBROKER_API_KEY_SECRET": "cloudburst-system/cloudbroker/key",
    "CLOUDBROKER_API_KEY": "a-key",
    "CLOUDBURST_CLOUDBROKER_FALLBACK": "false",
    "CLOUDBURST_CLOUDBROKER_TIMEOUT_S": "7",
    "CLOUDBURST_CATALOG": "/etc/cloudburst/catalog.json",
}


def test_committed_reference_is_what_the_generator_makes() -> None:
    assert COMMITTED.read_text() == config_reference_markdown(), (
        "docs/configuration.md is stale (a settings class changed): run "
        "`cloudburst config-reference`"
    )


def test_the_command_writes_the_reference(tmp_path: Path) -> None:
    out = tmp_path / "configuration.md"
    result = CliRunner().invoke(app, ["config-reference", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == config_reference_markdown()


def test_every_settings_class_is_a_source() -> None:
    declared: set[str] = set()
    packages = [
        p for p in ROOT.iterdir() if p.is_dir() and p.name[0] not in "._" and p.name != "tests"
    ]
    for path in (path for package in packages for path in package.rglob("*.py")):
        declared |= set(re.findall(r"^class (\w+)\(BaseSettings\)", path.read_text(), re.M))
    assert declared, "no settings class found: the search is broken"
    assert declared <= {source.model.__name__ for source in SOURCES}


def test_every_field_has_a_row() -> None:
    table = config_reference_markdown()
    for source in SOURCES:
        for variable in source.variables.values():
            assert f"| `{variable}` |" in table


def test_cloudbroker_variables_are_the_ones_from_env_reads() -> None:
    assert set(CLOUDBROKER_VARIABLES.values()) == set(CLOUDBROKER_SAMPLES)
    # The one field left out is documented with PriceSettings (the same variable).
    assert set(PlanningConfig.model_fields) - set(CLOUDBROKER_VARIABLES) == {"price_max_age_h"}
    default = PlanningConfig.from_env({})
    for field, variable in CLOUDBROKER_VARIABLES.items():
        read = PlanningConfig.from_env({variable: CLOUDBROKER_SAMPLES[variable]})
        assert getattr(read, field) != getattr(default, field), f"{variable} sets no {field}"


# How a description would name the history instead of the setting: a pass of
# docs/benchmarks-history.md ("Eighteenth pass"), a session, a date.
HISTORY_WORDS = re.compile(
    r"\b(?:\w+(?:st|nd|rd|th)|first|second|third|this|that|last|next)\s+(?:pass|session)\b"
    r"|\b20\d\d-\d\d-\d\d\b",
    re.IGNORECASE,
)


def test_descriptions_say_what_a_setting_does_not_when_it_was_chosen() -> None:
    """A description is what a user reads in docs/configuration.md: what the setting does
    and why its default, citing the history by a section that explains it ("Burst"), never
    which pass or day chose it. Fails on a description that cites (docs/benchmarks-history.md
    "Eighteenth pass") instead of "Burst"."""
    table = config_reference_markdown()
    found = [line for line in table.splitlines() if HISTORY_WORDS.search(line)]
    assert not found, "\n".join(found)
