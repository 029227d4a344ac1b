"""Load a :class:`Config` from defaults, a YAML file, environment variables and CLI overrides.

Precedence (highest first): CLI ``a.b=value`` > env ``CODERL_A__B=value`` > YAML > defaults. Values
from the CLI and the environment are parsed as YAML scalars/flow collections (``8``, ``true``,
``[a, b]``). Every error names the key, the offending value and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from coderl.config.models import Config
from coderl.errors import ConfigError
from coderl.yamlio import load_yaml

ENV_PREFIX = "CODERL_"


def load_config(
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    defaults: str | Path | None = None,
) -> Config:
    """Resolve the config: built-in defaults < a command's ``defaults`` YAML < YAML file at ``path`` <
    ``env`` (default os.environ) < ``overrides``."""
    data: dict[str, Any] = {}
    if defaults is not None:
        _merge(data, _read_yaml(Path(defaults)))
    if path is not None:
        _merge(data, _read_yaml(Path(path)))
    for key, raw in _env_items(os.environ if env is None else env):
        _set(data, key, _parse_value(raw), source=f"environment variable {_env_name(key)}")
    for item in overrides:
        key, raw = _split_override(item)
        _set(data, key, _parse_value(raw), source=f"override '{item}'")
    return validate_config(data)


def validate_config(data: Mapping[str, Any]) -> Config:
    """Validate a nested dict into a Config, turning pydantic's errors into one ConfigError."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, data)) from None


def dump_config(cfg: Config) -> str:
    """The resolved config as YAML (what each run directory stores as config.yaml)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def _read_yaml(path: Path) -> dict[str, Any]:
    if path.is_dir():
        hint = f"; its config.yaml: {path / 'config.yaml'}" if (path / "config.yaml").is_file() else ""
        raise ConfigError(f"config file {str(path)!r} is a folder, not a YAML file (pass a YAML file path or none{hint})")
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist (pass a YAML file path or none)")
    try:
        loaded = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"config file {str(path)!r} must hold a mapping at top level, got {type(loaded).__name__}"
        )
    return loaded


def _env_items(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """CODERL_A__B=v -> ("a.b", v). Variables without '__' (CODERL_CACHE_DIR) are not config keys."""
    items = []
    for name, raw in sorted(env.items()):
        if name.startswith(ENV_PREFIX) and "__" in name:
            key = ".".join(part.lower() for part in name[len(ENV_PREFIX) :].split("__"))
            items.append((key, raw))
        elif name.startswith(ENV_PREFIX):
            meant = _single_underscore_key(name[len(ENV_PREFIX) :].lower())
            if meant is not None:  # CODERL_ENGINE_MAX_BATCH_SIZE: a config key written with one '_'
                raise ConfigError(
                    f"environment variable {name}: sections and keys are joined by '__'; for {meant} write "
                    f"{_env_name(meant)}={raw}"
                )
    return items


def _single_underscore_key(rest: str) -> str | None:
    """``section.key`` when ``rest`` is one written ``section_key`` (a section's own field), else None."""
    for section, field in Config.model_fields.items():
        model = field.annotation
        if rest.startswith(section + "_") and isinstance(model, type) and issubclass(model, BaseModel):
            key = rest[len(section) + 1 :]
            if key in model.model_fields:
                return f"{section}.{key}"
    return None


def _env_name(key: str) -> str:
    return ENV_PREFIX + "__".join(part.upper() for part in key.split("."))


def _split_override(item: str) -> tuple[str, str]:
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(
            f"override {item!r} is not of the form key.sub=value (e.g. engine.max_batch_size=8)"
        )
    return key.strip(), raw


def _parse_value(raw: str) -> Any:
    try:
        value = load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError:
        return raw
    if isinstance(value, dict) and not raw.lstrip().startswith("{"):
        return raw  # "pypi:" or "bundled:" is a string cut short, not a mapping (those come as {k: v})
    return value


def _set(data: dict[str, Any], key: str, value: Any, source: str) -> None:
    parts = key.split(".")
    _check_key(parts, source)
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _check_key(parts: list[str], source: str) -> None:
    """Fail early, with the valid alternatives, on a key that the schema does not have."""
    model: type[BaseModel] = Config
    for depth, part in enumerate(parts):
        fields = model.model_fields
        if part not in fields:
            where = ".".join(parts[:depth]) or "the top level"
            raise ConfigError(
                f"{source}: unknown key '{'.'.join(parts[: depth + 1])}'; valid keys in {where}: "
                + ", ".join(sorted(fields))
            )
        annotation = fields[part].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        elif depth < len(parts) - 1:
            raise ConfigError(f"{source}: '{'.'.join(parts[: depth + 1])}' is a value and has no sub-keys")
    if isinstance(model, type) and model is not Config and parts and len(parts) == 1:
        raise ConfigError(
            f"{source}: '{parts[0]}' is a section; set one of its keys, e.g. {parts[0]}.<key>=value"
        )


def _describe(exc: ValidationError, data: Mapping[str, Any]) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            parent = _model_at(err["loc"][:-1])
            allowed = ", ".join(sorted(parent.model_fields)) if parent else "?"
            lines.append(f"unknown key '{loc}'; valid keys here: {allowed}")
            continue
        if err["type"] == "value_error" and len(err["loc"]) <= 1:
            # a section's or the root's own validator (coderl.config.rules): its message names the keys
            lines.append(err["msg"].removeprefix("Value error, "))
            continue
        value = err.get("input", _lookup(data, err["loc"]))
        hint = _field_doc(err["loc"])
        msg = f"{loc or 'config'}: got {value!r} — {err['msg']}"
        lines.append(msg + (f" ({hint})" if hint else ""))
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _model_at(loc: Sequence[Any]) -> type[BaseModel] | None:
    model: type[BaseModel] = Config
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not (
            isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        ):
            return None
        model = field.annotation
    return model


def _field_doc(loc: Sequence[Any]) -> str | None:
    parent = _model_at(loc[:-1]) if loc else None
    if parent is None or not loc:
        return None
    field = parent.model_fields.get(str(loc[-1]))
    return field.description if field else None


def _lookup(data: Mapping[str, Any], loc: Sequence[Any]) -> Any:
    node: Any = data
    for part in loc:
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return None
    return node


def _merge(dst: dict[str, Any], src: Mapping[str, Any]) -> None:
    for key, value in src.items():
        if isinstance(value, Mapping) and isinstance(dst.get(key), dict):
            _merge(dst[key], value)
        else:
            dst[key] = dict(value) if isinstance(value, Mapping) else value
