"""Whether a command line would be refused while parsing, as one line, without building or
running anything: a YAML file that does not parse (with its flag, file, line and column), an
unknown key, a value of the wrong type (a sweep checks every point this way before launching)."""

from __future__ import annotations

from pathlib import Path

from fl_lightning.runs.cli_class import build_cli_class
from fl_lightning.runs.error_lines import located, one_line


def yaml_problem(args: list[str]) -> str | None:
    """The first YAML file named on the command line that does not parse, as one line with
    its flag, file, line and column (jsonargparse names neither file nor line), or whose top
    level is not a mapping (``--config`` and a group file: a list is no set of options)."""
    import yaml

    for i, tok in enumerate(args):
        flag, _, value = tok.partition("=")
        if not flag.startswith("--"):
            continue
        if not value and i + 1 < len(args):
            value = args[i + 1]
        if not value.endswith((".yaml", ".yml")) or not Path(value).is_file():
            continue
        try:
            top = yaml.safe_load(Path(value).read_text())
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            context = getattr(err, "context", None)
            why = f"{problem} ({context})" if context else problem
            return f"{flag.lstrip('-')}: {value}{where}: {why}"
        group = flag.lstrip("-")
        if (group == "config" or "." not in group) and not isinstance(top, dict | None):
            return (
                f"{group}: {value} holds a {type(top).__name__} at its top level, not a mapping "
                "of options (option: value, one a line)"
            )
    return None


def argument_problem(args: list[str]) -> str | None:
    """Why ``fl-lightning <args>`` would be refused while parsing (an unknown key, a value of
    the wrong type, a missing or malformed config file), as one line; None if it parses. Builds
    nothing, so it is quick enough to check every point of a sweep before launching any."""
    from jsonargparse import ArgumentError

    problem = yaml_problem(args)
    if problem:
        return problem
    try:
        build_cli_class()(args, parse_only=True)
    except (ArgumentError, ValueError, TypeError, KeyError, FileNotFoundError) as err:
        return located(one_line(err), args)
    return None
