"""Argument errors of the ``sweep``, ``report``, ``audit`` and ``repro`` subcommands as one
line naming the option and the value (``error: --verify: expected an integer, got 'abc'``),
exit 2, instead of argparse's usage screen; and flags that may not be given together refused
the same way."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

_TYPES = {"int": "an integer", "float": "a number"}


def argparse_line(message: str, prog: str) -> str:
    """argparse's ``message`` rewritten as ``<option>: <why>`` (the option and the value)."""
    invalid = re.match(r"argument ([^:]+): invalid (\w+) value: (.+)$", message)
    if invalid:
        option, kind, value = invalid.groups()
        return f"{_option(option)}: expected {_TYPES.get(kind, kind)}, got {value}"
    choice = re.match(r"argument ([^:]+): invalid choice: (.+?) \(choose from (.+)\)$", message)
    if choice:
        option, value, choices = choice.groups()
        return f"{_option(option)}: {value} is not one of {choices}"
    argument = re.match(r"argument ([^:]+): (.+)$", message)
    if argument:
        option, why = argument.groups()
        why = re.sub(r"argument (\S+)", lambda m: _option(m.group(1)), why)
        return f"{_option(option)}: {why}"
    required = re.match(r"the following arguments are required: (.+)$", message)
    if required:
        return f"{required.group(1)}: required (see {prog} --help)"
    unknown = re.match(r"unrecognized arguments: (.+)$", message)
    if unknown:
        first = unknown.group(1).split()[0]
        what = "not an option" if first.startswith("-") else "an extra argument"
        return f"{first}: {what} of {prog} (see {prog} --help)"
    return message


def _option(spelled: str) -> str:
    """``--verify`` of argparse's ``-v/--verify`` (the long spelling a user types)."""
    names = spelled.split("/")
    return next((n for n in names if n.startswith("--")), names[0])


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {argparse_line(message, self.prog)}", file=sys.stderr)
        raise SystemExit(2)


def refuse_together(parser: argparse.ArgumentParser, given: dict[str, bool],
                    exclusive: Sequence[str]) -> None:  # fmt: skip
    """``parser.error`` (one line, exit 2) when two of the ``exclusive`` flags are set in
    ``given`` (flag -> whether the command line sets it): each would do something else, and
    silently obeying one of them runs what was not asked."""
    set_ = [flag for flag in exclusive if given.get(flag)]
    if len(set_) > 1:
        parser.error(
            f"argument {set_[1]}: not allowed with {set_[0]} (each does something else; "
            "give one of them)"
        )
