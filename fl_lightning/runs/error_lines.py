"""Bad input as one line, ``<field>: <why>``, from a ValueError or a jsonargparse error."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

_UNION = "Does not validate against any of the Union subtypes"
_YAML_MARK = re.compile(r'in "[^"]*", line (\d+), column (\d+)')


def one_line(err: BaseException) -> str:
    """The bad field and why, on one line, from a ValueError or a jsonargparse error."""
    text = str(err).strip() or type(err).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    stripped = [ln.lstrip("- ") for ln in lines]
    unknown = re.search(r"unrecognized arguments: --([^\s=]+)", text)
    if unknown:
        return f"{unknown.group(1)}: not an option (see fl-lightning fit --help)"
    found = re.findall(r'Parser key "([^"]+)"', text)
    keys = [k for i, k in enumerate(found) if i == 0 or k != found[i - 1]]  # said twice: once
    not_accepted = re.search(r"does not accept option '([^']+)'", text)
    if not_accepted and not keys:
        return f"{not_accepted.group(1)}: not an option (see fl-lightning fit --help)"
    option = re.search(r"class_path '([^']+)':\s*Option '([^']+)' is not accepted", text)
    if option:
        cls = option.group(1).rsplit(".", 1)[-1]
        where = ".".join(keys) or "class"
        return f"{where}.init_args.{option.group(2)}: not a parameter of {cls}"
    # jsonargparse refuses nan and ±inf for a float (``float | None`` too) without saying why
    not_finite = re.search(r"(?:Got|Given) value: ([+-]?(?:nan|inf|infinity))\s*$", text,
                           flags=re.IGNORECASE | re.MULTILINE)  # fmt: skip
    if not_finite and keys and "Expected a <class 'float'>" in text:
        return (
            f"{'.'.join(keys)}: {not_finite.group(1)} is not a finite number; give a finite value"
        )
    unknown_class = _unknown_class(text, ".".join(keys))
    if unknown_class:
        return unknown_class
    if _UNION in text:
        # A class-typed group (strategy, client.dp_sgd, ...) whose __init__ refused a value:
        # the refusal names the field; "Expected a <class 'NoneType'>" is the other subtype.
        labels = ("Subtypes:", "Errors:", "Given value", "Expected")
        named = [
            ln
            for ln in stripped
            if re.match(r"^[A-Za-z_][\w.]*: ", ln) and not ln.startswith(labels)
        ]
        if named:
            return named[0]
    unable = re.search(r"Unable to load config '([^']+)'", text)
    mark = _YAML_MARK.findall(text)
    if unable and not mark and unable.group(1).endswith((".yaml", ".yml")):
        return f"{'.'.join(keys) or 'config'}: config file {unable.group(1)!r} not found"
    if unable and mark:
        problem = next((ln for ln in stripped[2:] if not ln.startswith("in ")), "invalid YAML")
        line, col = mark[-1]
        where = ".".join(keys) or "config"
        return f"{where}: {unable.group(1)} line {line}, column {col}: {problem}"
    if not keys:
        return lines[0] if lines else text
    reason = next(
        (ln for ln in stripped if ln.startswith("Expected")),
        next((ln for ln in stripped if ln.startswith("Problem")), lines[0]),
    )
    given = next((ln for ln in lines if ln.startswith("Given value:")), "")
    given_value = given.split(":", 1)[1].strip() if given else ""
    got = f" (got {given_value!r})" if given_value and "Got value" not in reason else ""
    return f"{'.'.join(keys)}: {reason}{got}"


def _unknown_class(text: str, key: str) -> str | None:
    """A class-typed option (``strategy``, ``client.net``, a mechanism) naming a class that
    cannot be imported: the name, why, and what it may name instead."""
    problem = re.search(r"Problem with given class_path '([^']+)':\s*\n\s*(.+)", text)
    dotted = re.search(r"Expected a dot import path string: (\S+)", text)
    if not (problem or dotted) or not key or "is not accepted" in text:
        return None
    base = re.search(r"Subtypes: \[<class '([\w.]+)'>", text)
    base_name = base.group(1).rsplit(".", 1)[-1] if base else "the option's"
    if problem:
        name, why = problem.group(1), problem.group(2).strip()
    else:
        name, why = dotted.group(1), "no class of that name is known"  # type: ignore[union-attr]
    choices = ""
    if base_name == "Strategy":
        from fl_lightning.runs.help import subclasses_of

        choices = f"; choose one of {', '.join(subclasses_of('Strategy', 'strategies'))}"
    elif base_name == "Module":
        from fl_lightning.runs.help import model_zoo

        choices = f"; choose one of {', '.join(model_zoo())} (fl_lightning.models.<name>)"
    return (
        f"{key}: cannot use class {name!r} ({why}){choices}, or your own {base_name} "
        "subclass by its dotted path with --import MODULE"
    )


def located(line: str, argv: list[str]) -> str:
    """``line`` (from :func:`one_line`) with where the bad key or file was written, when a
    YAML file on the command line holds it: ``(FILE line N)``, and for an unknown option the
    nearest option of the same group."""
    unknown = re.match(r"^([\w.]+): not an option \(see fl-lightning fit --help\)$", line)
    missing = re.match(r"^([\w.]+): config file '(.+)' not found$", line)
    if unknown:
        key = unknown.group(1)
        where = _find_key(key.split("."), _yaml_files(argv))
        hint = _nearest_option(key)
        out = f"{key}: not an option" + (f" ({where})" if where else "")
        out += f"; did you mean {hint}?" if hint else ""
        return out + " (see fl-lightning fit --help)"
    if missing:
        key, value = missing.groups()
        for path, _ in _yaml_files(argv):
            for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if value in text:
                    wanted = (path.parent / value).resolve()
                    return (
                        f"{key}: {value} not found (named in {path} line {n}; a path in a "
                        f"config is relative to that config's folder: {wanted})"
                    )
        return f"{key}: {value} not found (relative to the working directory)"
    return line


def _yaml_files(argv: list[str]) -> list[tuple[Path, list[str]]]:
    """The YAML files the command line names, each with the key path it is read under
    (``--config``: the root; ``--client FILE``: ``["client"]``), and the group files those
    configs name (``client: ../client/x.yaml``, relative to the config)."""
    out: list[tuple[Path, list[str]]] = []
    for i, tok in enumerate(argv):
        flag, _, value = tok.partition("=")
        if not flag.startswith("--"):
            continue
        if not value and i + 1 < len(argv):
            value = argv[i + 1]
        path = Path(value)
        if value.endswith((".yaml", ".yml")) and path.is_file():
            out.append((path, [] if flag == "--config" else flag[2:].split(".")))
    for path, base in list(out):
        if base:
            continue
        try:
            top = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError:
            continue
        for group, value in (top or {}).items() if isinstance(top, dict) else ():
            nested = path.parent / str(value)
            if str(value).endswith((".yaml", ".yml")) and nested.is_file():
                out.append((nested, [str(group)]))
    return out


def _find_key(parts: list[str], files: list[tuple[Path, list[str]]]) -> str | None:
    """``FILE line N`` of the last file that writes the key ``parts`` (later files win)."""
    found = None
    for path, base in files:
        key_node = None
        if parts[: len(base)] != base:
            continue
        try:
            node = yaml.compose(path.read_text(encoding="utf-8"))
        except yaml.YAMLError:
            continue
        for part in parts[len(base) :]:
            if not isinstance(node, yaml.MappingNode):
                node = None
                break
            match = next((kv for kv in node.value if kv[0].value == part), None)
            if match is None:
                node = None
                break
            key_node, node = match
        if node is not None and key_node is not None:
            found = f"{path} line {key_node.start_mark.line + 1}"
    return found


def _nearest_option(key: str) -> str | None:
    """The group's option closest in spelling to ``key`` (the groups of ``fit --help``)."""
    import difflib

    from fl_lightning.runs.help import GROUPS, group_options

    group = key.split(".", 1)[0]
    keys = [o.key for g, rel, cls, _ in GROUPS if g == group for o in group_options(g, rel, cls)]
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.75)
    return close[0] if close else None
