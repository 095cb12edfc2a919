"""Comma-separated option values (``--batch 32,64``, ``--sync sync,async``), parsed with
one-line errors that name the option and show an example of it.

In the bottom layer (standard library and ``profiler.errors`` only): the sweep's grid,
the engines' own options, the study and calibration commands all read lists with it.
"""

from __future__ import annotations

from typing import Iterable

from .errors import ConfigError

# A list of each option as its messages show it: a user who typed `--devices abc` is
# shown device counts, not batch sizes.
LIST_EXAMPLES = {"--devices": "1,2,4", "--batch": "32,64", "--layers": "20,32",
                 "--lr": "0.01,0.02", "--dilations": "2,4,8"}


def parse_int_list(text: str, option: str) -> list[int]:
    """``"32,64"`` → ``[32, 64]``; a bad item raises ``ConfigError`` naming ``option``."""
    return _parse_numbers(text, option, int, "a whole number")


def parse_float_list(text: str, option: str) -> list[float]:
    """``"0.01,0.02"`` → ``[0.01, 0.02]``; a bad item raises ``ConfigError`` naming ``option``."""
    return _parse_numbers(text, option, float, "a number")


def _parse_numbers(text: str, option: str, convert, kind: str) -> list:
    values = []
    for item in _items(text, option):
        try:
            values.append(convert(item))
        except ValueError:
            raise ConfigError(f"{option} {item!r} is not {kind}: give a comma-separated "
                              f"list{_such_as(option)}") from None
    return values


def _such_as(option: str) -> str:
    example = LIST_EXAMPLES.get(option)
    return f", such as {option} {example}" if example else ""


def parse_choice_list(text: str, option: str, choices: Iterable[str]) -> list[str]:
    """``"sync,async"`` → ``["sync", "async"]``, each checked against ``choices``."""
    choices = tuple(choices)
    values = _items(text, option)
    for item in values:
        if item not in choices:
            raise ConfigError(f"{option} {item!r} is unknown: use one of {', '.join(choices)}")
    return values


def _items(text: str, option: str) -> list[str]:
    items = [part.strip() for part in str(text).split(",") if part.strip()]
    if not items:
        raise ConfigError(f"{option} {text!r} is an empty list: give at least one value, "
                          f"comma-separated{_such_as(option)}")
    return items
