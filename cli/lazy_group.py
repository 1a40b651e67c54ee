"""A typer group whose commands of other modules are imported only when one is looked up: by
running it, by its `--help` or the group's, or by shell completion. `cloudburst plan` then
imports what plan needs and not every other command's dependencies (the bootstrap renderer,
the activities, the workflows), which were most of its start-up time.

A command is named by "module:attribute": a typer app (a group of commands, as
`app.add_typer` registers it) or a command function (as `app.command` registers it). Both are
built into click commands by typer's own functions, with the group's settings, so a command
reads, parses and completes as it did registered eagerly.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, ClassVar

import typer
from typer.core import TyperGroup
from typer.main import get_command_from_info, get_group_from_info

if TYPE_CHECKING:
    # The click typer builds on (its own copy of click, which it does not re-export).
    from typer._click import Command


class LazyGroup(TyperGroup):
    """The group of a `typer.Typer(cls=...)` app. A subclass names the commands of other
    modules in `lazy_commands` (listed before the app's own commands) and `lazy_groups`
    (after them), as typer lists an app's registered commands, then its groups."""

    lazy_commands: ClassVar[Mapping[str, str]] = {}
    lazy_groups: ClassVar[Mapping[str, str]] = {}
    # Typer's default, which an app built with `typer.Typer(cls=...)` keeps unless it says
    # otherwise; a command's wrapper carries it for typer's traceback filter.
    pretty_exceptions_short: ClassVar[bool] = True

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        own = dict(self.commands)
        names = [*self.lazy_commands, *own, *self.lazy_groups]
        self.commands = _Commands(names, own, self._load)

    def list_commands(self, ctx: object) -> list[str]:
        """Every name, without importing a command (typer's own builds each)."""
        return list(self.commands)

    def _load(self, name: str) -> Command:
        spec = self.lazy_commands.get(name) or self.lazy_groups[name]
        module, _, attribute = spec.partition(":")
        target = getattr(importlib.import_module(module), attribute)
        holder = typer.Typer()
        if isinstance(target, typer.Typer):
            holder.add_typer(target, name=name)
            return get_group_from_info(
                holder.registered_groups[0],
                pretty_exceptions_short=self.pretty_exceptions_short,
                suggest_commands=self.suggest_commands,
                rich_markup_mode=self.rich_markup_mode,
            )
        holder.command(name)(target)
        return get_command_from_info(
            holder.registered_commands[0],
            pretty_exceptions_short=self.pretty_exceptions_short,
            rich_markup_mode=self.rich_markup_mode,
        )


class _Commands(MutableMapping[str, "Command"]):
    """A group's commands by name, in listing order: every name is known (for listing, and
    for typer's "did you mean" on a typo) and each command is built when first looked up."""

    def __init__(
        self,
        names: list[str],
        loaded: dict[str, Command],
        load: Callable[[str], Command],
    ) -> None:
        self._names = names
        self._loaded = loaded
        self._load = load

    def __getitem__(self, name: str) -> Command:
        if name not in self._loaded:
            if name not in self._names:
                raise KeyError(name)
            self._loaded[name] = self._load(name)
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __setitem__(self, name: str, command: Command) -> None:
        if name not in self._names:
            self._names.append(name)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._loaded.pop(name, None)
