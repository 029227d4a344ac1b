"""Environment (filters, loader, autoescape policy, template cache) and Template."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Union

from .errors import TemplateNotFound
from .filters import DEFAULT_FILTERS
from .lexer import tokenize
from .loader import BaseLoader
from .nodes import Node
from .parser import parse
from .render import Renderer
from .runtime import Context

AutoescapePolicy = Union[bool, Callable[[Union[str, None]], bool]]


def select_autoescape(
    enabled_extensions: Iterable[str] = ("html", "htm", "xml"),
    default_for_string: bool = True,
    default: bool = False,
) -> Callable[[str | None], bool]:
    """An autoescape policy deciding by template name: escape ``*.html`` etc., not ``*.txt``.

    Templates without a name (``from_string``) get ``default_for_string``; names with another
    extension get ``default``.
    """
    suffixes = tuple("." + ext.lstrip(".").lower() for ext in enabled_extensions)

    def policy(name: str | None) -> bool:
        if name is None:
            return default_for_string
        if name.lower().endswith(suffixes):
            return True
        return default

    return policy


class Template:
    def __init__(self, env: "Environment", nodes: list[Node], name: str | None, autoescape: bool) -> None:
        self.env = env
        self.nodes = nodes
        self.name = name
        self.autoescape = autoescape

    def render(self, *args: Mapping[str, Any], **kwargs: Any) -> str:
        """Render with the variables of an optional mapping plus keyword arguments."""
        data = dict(*args, **kwargs)
        return Renderer(self.env, self.autoescape).render(self.nodes, Context(data))

    def __repr__(self) -> str:
        return f"<Template {self.name or '<string>'}>"


class Environment:
    """Shared configuration. ``autoescape`` is a bool or a policy ``f(template_name) -> bool``."""

    def __init__(
        self,
        loader: BaseLoader | None = None,
        autoescape: AutoescapePolicy = True,
        filters: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        self.loader = loader
        self.autoescape = autoescape
        self.filters = dict(DEFAULT_FILTERS)
        if filters:
            self.filters.update(filters)
        self._cache: dict[str, tuple[str, Template]] = {}

    def autoescape_for(self, name: str | None) -> bool:
        if callable(self.autoescape):
            return bool(self.autoescape(name))
        return bool(self.autoescape)

    def parse(self, source: str, name: str | None = None) -> list[Node]:
        return parse(tokenize(source, name), name, self.filters)

    def from_string(self, source: str, name: str | None = None) -> Template:
        return Template(self, self.parse(source, name), name, self.autoescape_for(name))

    def get_template(self, name: str) -> Template:
        """Load, parse and cache a template; the cache entry is refreshed when the source changes."""
        if self.loader is None:
            raise TemplateNotFound(name)
        source = self.loader.get_source(name)
        cached = self._cache.get(name)
        if cached is not None and cached[0] == source:
            return cached[1]
        template = Template(self, self.parse(source, name), name, self.autoescape_for(name))
        self._cache[name] = (source, template)
        return template
