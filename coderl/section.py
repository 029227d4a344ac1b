"""The base of every configuration section (``coderl.config`` assembles them into the root config).

Each package owns its section in its own ``config`` module (``coderl.engine.config``,
``coderl.rollout.config``, ...), which imports nothing from coderl but this module, ``types`` and
``errors``: the config layer sits at the bottom of the package graph, under everything that reads it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are errors, field docstrings document the fields (and errors
    quote them), and assignments are validated like construction."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


def resolve_auto_dtype(data: object) -> object:
    """A section's raw fields with ``dtype: auto`` replaced by what its ``device`` computes natively here
    (:func:`coderl.hardware.auto_dtype`), before validation: the section, and a run's config.yaml, hold
    the dtype that ran."""
    if isinstance(data, dict) and data.get("dtype") == "auto":
        from coderl.hardware import auto_dtype

        return {**data, "dtype": auto_dtype(str(data.get("device") or "auto"))}
    return data
