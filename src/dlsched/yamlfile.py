"""Reading the YAML files users give (cluster, quotas, job specs, sweep specs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from .errors import SpecError

# Chosen: far above any cluster, quota or sweep spec (the bundled ones are a few KiB)
MAX_YAML_BYTES = 16 * 2**20


def read_yaml(path: str | Path, field: str):
    """The file's content; :class:`SpecError` naming ``field`` when it cannot be read or parsed
    (not UTF-8, nested too deep for the parser, over :data:`MAX_YAML_BYTES`)."""
    try:
        size = Path(path).stat().st_size
        if size > MAX_YAML_BYTES:
            raise SpecError(field, f"{path} is {size:,} bytes, over {MAX_YAML_BYTES:,}")
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
        reason = "nested too deep" if isinstance(e, RecursionError) else str(e)
        raise SpecError(field, f"cannot read {path} as YAML: {reason}") from None
