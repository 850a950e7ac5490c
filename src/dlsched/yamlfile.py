"""Reading the YAML files users give (cluster, quotas, job specs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from .errors import SpecError


def read_yaml(path: str | Path, field: str):
    """The file's content; :class:`SpecError` naming ``field`` when it cannot be read or parsed."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(field, f"cannot read {path} as YAML: {e}") from None
