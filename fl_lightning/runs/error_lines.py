"""Bad input as one line, ``<field>: <why>``, from a ValueError or a jsonargparse error."""

from __future__ import annotations

import re

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
    keys = re.findall(r'Parser key "([^"]+)"', text)
    option = re.search(r"class_path '([^']+)':\s*Option '([^']+)' is not accepted", text)
    if option:
        cls = option.group(1).rsplit(".", 1)[-1]
        where = ".".join(keys) or "class"
        return f"{where}.init_args.{option.group(2)}: not a parameter of {cls}"
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
