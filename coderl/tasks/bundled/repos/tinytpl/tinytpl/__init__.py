"""tinytpl: a tiny template engine."""

from __future__ import annotations

from typing import Any

from .environment import Environment, Template, select_autoescape
from .errors import TemplateError, TemplateNotFound, TemplateSyntaxError
from .loader import BaseLoader, ChoiceLoader, DictLoader, FunctionLoader
from .markup import Markup, escape
from .runtime import Undefined

__all__ = [
    "BaseLoader",
    "ChoiceLoader",
    "DictLoader",
    "Environment",
    "FunctionLoader",
    "Markup",
    "Template",
    "TemplateError",
    "TemplateNotFound",
    "TemplateSyntaxError",
    "Undefined",
    "escape",
    "render",
    "select_autoescape",
]

__version__ = "0.3.0"

_default_env = Environment()


def render(source: str, /, **context: Any) -> str:
    """Render ``source`` with an autoescaping default environment."""
    return _default_env.from_string(source).render(**context)
