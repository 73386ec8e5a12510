"""`OptionGroup`, the options of one thing a command configures, and `takes_options`, which
gives a command the options of its groups.

A group declares its options as the signature of its `options` function (Typer's `Annotated`
parameters, each default read from the library) or, where they come from elsewhere (the variant
specs), as `parameters()`; its `parse` turns their values into what it configures. Typer reads a
command's options from its signature, so `takes_options(*groups)` builds the signature of
`command(**values)` from the groups' parameters, in the groups' order.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

Command = TypeVar("Command", bound=Callable[..., Any])


class OptionGroup:
    """The options of one thing a command configures."""

    @staticmethod
    def options() -> None:
        """Declares the group's options as its parameters (none here)."""

    def parameters(self) -> list[inspect.Parameter]:
        """The group's options, as Typer reads them from a signature."""
        return list(inspect.signature(self.options, eval_str=True).parameters.values())

    def values(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """This group's values among a command's."""
        return {parameter.name: given[parameter.name] for parameter in self.parameters()}


def takes_options(*groups: OptionGroup) -> Callable[[Command], Command]:
    """Give `command(**values)` the options of `groups` (in their order) as its signature; an
    option declared by two groups is refused."""

    def decorate(command: Command) -> Command:
        owner: dict[str, str] = {}
        parameters = []
        for group in groups:
            for parameter in group.parameters():
                if parameter.name in owner:
                    raise TypeError(f"option {parameter.name!r} is declared by both "
                                    f"{owner[parameter.name]} and {type(group).__name__}")
                owner[parameter.name] = type(group).__name__
                parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))
        command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in parameters}
        return command

    return decorate
