"""Reading the YAML files users give (cluster, quotas, job specs, sweep specs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeGuard

import yaml

from .errors import SpecError

# Chosen: far above any cluster, quota or sweep spec (the bundled ones are a few KiB)
MAX_YAML_BYTES = 16 * 2**20
# Values a document may expand to through its aliases: what a file of MAX_YAML_BYTES could hold
# written out (a value and a comma at the least). Ten lines of aliases each repeating the one
# before ten times are 10^10 values, which whatever reads them (JSON for a job spec) expands.
MAX_YAML_VALUES = MAX_YAML_BYTES // 2


def read_yaml(path: str | Path, field: str) -> Any:
    """The file's content; :class:`SpecError` naming ``field`` when it cannot be read or parsed
    (not UTF-8, nested too deep for the parser, over :data:`MAX_YAML_BYTES`, a device or pipe
    that does not end there), or when its aliases make it refer to itself or expand past
    :data:`MAX_YAML_VALUES`."""
    try:
        with open(path, "rb") as f:  # read to the bound, not to the size: /dev/zero has none
            raw = f.read(MAX_YAML_BYTES + 1)
        if len(raw) > MAX_YAML_BYTES:
            raise SpecError(field, f"{path} is over {MAX_YAML_BYTES:,} bytes")
        data = yaml.load(raw.decode("utf-8"), Loader=_PlainLoader)
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
        reason = "nested too deep" if isinstance(e, RecursionError) else str(e)
        raise SpecError(field, f"cannot read {path} as YAML: {reason}") from None
    if problem := _alias_problem(data):
        raise SpecError(field, f"{path} {problem}")
    if problem := _not_plain(data):
        raise SpecError(field, f"{path} {problem}")
    return data


class _PlainLoader(yaml.SafeLoader):
    """YAML's safe loader but that a timestamp (``deadline: 2026-11-23T18:00:00Z``) stays the
    text it was: what reads it parses it (a datetime is no JSON, and a job spec is sent as
    JSON)."""


_PlainLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

_PLAIN = (str, int, float, bool, type(None))


def _not_plain(data: object) -> str | None:
    """Where the document holds a value that is not plain data (text, a number, a boolean,
    null, or a list or mapping of those): an explicit tag such as ``!!set``, ``!!binary`` or
    ``!!timestamp`` (asked after ``_alias_problem``: no loop is left)."""
    todo: list[tuple[object, str]] = [(data, "")]
    seen: set[int] = set()
    while todo:
        value, where = todo.pop()
        if isinstance(value, dict):
            if id(value) in seen:
                continue
            seen.add(id(value))
            for key, child in value.items():
                if not isinstance(key, _PLAIN):
                    return f"has a key of type {type(key).__name__} at {where or 'the top'}"
                todo.append((child, f"{where}.{key}" if where else str(key)))
        elif isinstance(value, list):
            if id(value) in seen:
                continue
            seen.add(id(value))
            todo.extend((child, f"{where}[{i}]") for i, child in enumerate(value))
        elif not isinstance(value, _PLAIN):
            return (
                f"holds a value of type {type(value).__name__} at {where or 'the top'}: only "
                "text, numbers, booleans, null, lists and mappings"
            )
    return None


def _alias_problem(data: object) -> str | None:
    """Why the document cannot be read as plain data: a list or mapping inside itself, or more
    than MAX_YAML_VALUES values once every alias is written out (each list or mapping is
    counted once, however many aliases name it)."""
    written: dict[int, int] = {}  # a list or mapping -> its values written out
    inside: set[int] = set()  # the lists and mappings around the one being counted
    todo: list[tuple[dict | list, bool]] = [(data, False)] if _nested(data) else []
    while todo:
        value, leaving = todo.pop()
        if leaving:
            inside.discard(id(value))
            children = _children(value)
            count = len(children) + sum(written[id(v)] for v in children if _nested(v))
            if count > MAX_YAML_VALUES:
                return f"expands to over {MAX_YAML_VALUES:,} values through its aliases"
            written[id(value)] = count
        elif id(value) in inside:
            return "refers to itself (an alias inside what it names)"
        elif id(value) not in written:
            inside.add(id(value))
            todo.append((value, True))
            todo.extend((v, False) for v in _children(value) if _nested(v))
    return None


def _nested(value: object) -> TypeGuard[dict | list]:
    return isinstance(value, dict | list)


def _children(value: dict | list) -> list:
    return list(value.values()) if isinstance(value, dict) else value
