"""Exceptions raised by tinytpl."""

from __future__ import annotations


class TemplateError(Exception):
    """Base class for every tinytpl error."""


class TemplateSyntaxError(TemplateError):
    """The template source is malformed.  ``lineno`` is 1-based; ``name`` is the template name."""

    def __init__(self, message: str, lineno: int, name: str | None = None) -> None:
        self.message = message
        self.lineno = lineno
        self.name = name
        super().__init__(message, lineno, name)

    def __str__(self) -> str:
        where = self.name if self.name is not None else "<template>"
        return f"{where}, line {self.lineno}: {self.message}"


class TemplateNotFound(TemplateError):
    """A loader has no template with the given name."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"template not found: {name!r}")
