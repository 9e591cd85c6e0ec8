"""`${VAR}` and `${VAR:-default}` in config values: secrets and endpoints from the environment.

A service keeps its token, a camera's password or a host name out of the YAML and the command line
(which `ps` shows to everyone): `token: ${FRAMEWIRE_TOKEN}`, `uri: rtsp://cam:${CAM_PASSWORD}@10.0.0.5/s1`,
`endpoint: tcp://${BIND_HOST:-127.0.0.1}:5560`. Only string values are expanded, after the YAML is
parsed, so a value from the environment is never read as YAML. `$${` writes a literal `${`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from framewire.pipeline.errors import ConfigError

_REFERENCE = re.compile(r"\$(\$)?\{([^}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def expand(raw: Any, environ: Mapping[str, str] | None = None, where: str = "") -> Any:
    """`raw` (a parsed config) with every `${...}` in its string values filled in; ConfigError names
    the key of an unset variable without a default."""
    env = os.environ if environ is None else environ
    if isinstance(raw, dict):
        return {k: expand(v, env, f"{where}.{k}" if where else str(k)) for k, v in raw.items()}
    if isinstance(raw, list):
        return [expand(v, env, f"{where}.{i}" if where else str(i)) for i, v in enumerate(raw)]
    if isinstance(raw, str) and "${" in raw:
        return _REFERENCE.sub(lambda m: _value(m, env, where or "(top level)"), raw)
    return raw


def _value(match: re.Match[str], env: Mapping[str, str], where: str) -> str:
    if match.group(1):  # $${...}: written as is, one $ less
        return match.group(0)[1:]
    body = match.group(2)
    name, sep, default = body.partition(":-")
    if not _NAME.match(name):
        raise ConfigError(f"{where}: ${{{body}}} is not ${{NAME}} or ${{NAME:-default}}")
    value = env.get(name)
    if value is None or (sep and value == ""):
        if sep:
            return default
        raise ConfigError(f"{where}: environment variable {name} is not set (${{{name}:-default}} gives a default)")
    return value
