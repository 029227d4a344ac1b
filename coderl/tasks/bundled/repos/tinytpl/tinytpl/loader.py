"""Template loaders: where ``Environment.get_template`` and ``{% include %}`` find sources."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .errors import TemplateNotFound


class BaseLoader:
    def get_source(self, name: str) -> str:
        """Return the source of template ``name`` or raise TemplateNotFound."""
        raise NotImplementedError

    def list_templates(self) -> list[str]:
        return []


class DictLoader(BaseLoader):
    """Templates from a mapping of name -> source. Later changes to the mapping are picked up."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.mapping = mapping

    def get_source(self, name: str) -> str:
        try:
            return self.mapping[name]
        except KeyError:
            raise TemplateNotFound(name) from None

    def list_templates(self) -> list[str]:
        return sorted(self.mapping)


class FunctionLoader(BaseLoader):
    """Templates from ``func(name)``, which returns the source or None."""

    def __init__(self, func: Callable[[str], str | None]) -> None:
        self.func = func

    def get_source(self, name: str) -> str:
        source = self.func(name)
        if source is None:
            raise TemplateNotFound(name)
        return source


class ChoiceLoader(BaseLoader):
    """Tries each loader in turn; the first that has the template wins."""

    def __init__(self, loaders: Iterable[BaseLoader]) -> None:
        self.loaders = list(loaders)

    def get_source(self, name: str) -> str:
        for loader in self.loaders:
            try:
                return loader.get_source(name)
            except TemplateNotFound:
                continue
        raise TemplateNotFound(name)

    def list_templates(self) -> list[str]:
        names: set[str] = set()
        for loader in self.loaders:
            names.update(loader.list_templates())
        return sorted(names)
