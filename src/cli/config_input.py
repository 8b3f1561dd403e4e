"""A queues.yaml as the command line takes it: a file, standard input, or a Kubernetes ConfigMap
holding one (as YuniKorn's shim deploys it); and how its errors name where it came from."""

from __future__ import annotations

import sys
from pathlib import Path

from korral.errors import ConfigError, ConfigLimitError

# the key under which YuniKorn's Kubernetes shim keeps queues.yaml in its ConfigMap (yunikorn-configs)
CONFIGMAP_KEY = "queues.yaml"


def read_config(file: Path) -> tuple[str, str]:
    """The queues.yaml text FILE holds (itself, or inside a ConfigMap) and how to name it in errors.

    Unreadable, not UTF-8, or a Kubernetes object that carries no queues.yaml is a ConfigError.
    """
    name = source_name(file)
    try:
        if str(file) == "-":
            text = sys.stdin.read()
        else:
            text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read {name}: {error}") from error
    return unwrap_configmap(text, name)


def source_name(file: Path) -> str:
    return "<stdin>" if str(file) == "-" else str(file)


def unwrap_configmap(text: str, name: str) -> tuple[str, str]:
    """A ConfigMap's data."queues.yaml" (the shim's way to deploy it); any other text unchanged."""
    from korral.config.yaml_reader import read_yaml

    try:
        document = read_yaml(text)  # within the bounds of a config (size, nesting, aliases)
    except ConfigLimitError:
        raise
    except ConfigError:
        return text, name  # not one YAML document: the validator reports where it breaks
    if not isinstance(document, dict) or not ({"apiVersion", "kind"} & document.keys()):
        return text, name
    kind = document.get("kind")
    if kind != "ConfigMap":
        raise ConfigError(
            f"{name} is a Kubernetes {kind or 'object'}, not a queues.yaml: give the queues.yaml, or the "
            f'ConfigMap that holds it under data."{CONFIGMAP_KEY}"'
        )
    data = document.get("data")
    embedded = data.get(CONFIGMAP_KEY) if isinstance(data, dict) else None
    if not isinstance(embedded, str):
        keys = ", ".join(sorted(map(str, data))) if isinstance(data, dict) and data else "none"
        raise ConfigError(
            f'{name} is a Kubernetes ConfigMap without data."{CONFIGMAP_KEY}" (its data keys: {keys}); '
            "YuniKorn's shim reads the queues from that key"
        )
    return embedded, f'{name} (data."{CONFIGMAP_KEY}")'


def naming(error: ConfigError, source: str) -> str:
    """The error with the file named where the YAML parser could only say it read a string."""
    return str(error).replace('"<unicode string>"', f'"{source}"')
