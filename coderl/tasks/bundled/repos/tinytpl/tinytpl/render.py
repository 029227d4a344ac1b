"""Walk the node tree and produce output."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from .errors import TemplateError
from .markup import escape
from .nodes import (
    And,
    Compare,
    Const,
    Expr,
    Filter,
    For,
    Getattr,
    If,
    Include,
    Name,
    Node,
    Not,
    Or,
    Output,
    Set,
    Text,
)
from .runtime import Context, LoopInfo, Undefined, lookup

if TYPE_CHECKING:
    from .environment import Environment

MAX_INCLUDE_DEPTH = 32

_COMPARE = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
}


class Renderer:
    def __init__(self, env: "Environment", autoescape: bool, depth: int = 0) -> None:
        self.env = env
        self.autoescape = autoescape
        self.depth = depth

    def render(self, nodes: list[Node], ctx: Context) -> str:
        out: list[str] = []
        self.render_nodes(nodes, ctx, out)
        return "".join(out)

    def render_nodes(self, nodes: list[Node], ctx: Context, out: list[str]) -> None:
        for node in nodes:
            if isinstance(node, Text):
                out.append(node.text)
            elif isinstance(node, Output):
                out.append(self.finalize(self.eval(node.expr, ctx)))
            elif isinstance(node, If):
                self._render_if(node, ctx, out)
            elif isinstance(node, For):
                self._render_for(node, ctx, out)
            elif isinstance(node, Set):
                ctx.set(node.name, self.eval(node.expr, ctx))
            elif isinstance(node, Include):
                self._render_include(node, ctx, out)
            else:  # pragma: no cover - the parser only builds the nodes above
                raise TypeError(f"unknown node {node!r}")

    def finalize(self, value: Any) -> str:
        if value is None or isinstance(value, Undefined):
            return ""
        if self.autoescape:
            return escape(value)
        return str(value)

    def _render_if(self, node: If, ctx: Context, out: list[str]) -> None:
        for condition, body in node.branches:
            if self.eval(condition, ctx):
                self.render_nodes(body, ctx, out)
                return
        self.render_nodes(node.else_body, ctx, out)

    def _render_for(self, node: For, ctx: Context, out: list[str]) -> None:
        value = self.eval(node.iterable, ctx)
        if value is None:
            value = ()
        try:
            items = list(value)
        except TypeError:
            raise TemplateError(f"line {node.lineno}: {type(value).__name__} object is not iterable") from None
        if not items:
            self.render_nodes(node.else_body, ctx, out)
            return
        ctx.push()
        try:
            for index0, item in enumerate(items):
                self._assign(node, item, ctx)
                ctx.set("loop", LoopInfo(index0, len(items)))
                self.render_nodes(node.body, ctx, out)
        finally:
            ctx.pop()

    def _assign(self, node: For, item: Any, ctx: Context) -> None:
        if len(node.targets) == 1:
            ctx.set(node.targets[0], item)
            return
        values = list(item)
        if len(values) != len(node.targets):
            raise TemplateError(
                f"line {node.lineno}: cannot unpack {len(values)} values into {len(node.targets)} names"
            )
        for target, value in zip(node.targets, values):
            ctx.set(target, value)

    def _render_include(self, node: Include, ctx: Context, out: list[str]) -> None:
        name = self.eval(node.template, ctx)
        if self.depth >= MAX_INCLUDE_DEPTH:
            raise TemplateError(f"line {node.lineno}: includes nested too deeply (recursive include of {name!r}?)")
        template = self.env.get_template(str(name))
        renderer = Renderer(self.env, template.autoescape, self.depth + 1)
        ctx.push()
        try:
            renderer.render_nodes(template.nodes, ctx, out)
        finally:
            ctx.pop()

    # -- expressions -----------------------------------------------------------------------

    def eval(self, node: Expr, ctx: Context) -> Any:
        if isinstance(node, Const):
            return node.value
        if isinstance(node, Name):
            return ctx.resolve(node.name)
        if isinstance(node, Getattr):
            return lookup(self.eval(node.obj, ctx), node.attr)
        if isinstance(node, Filter):
            value = self.eval(node.expr, ctx)
            args = [self.eval(arg, ctx) for arg in node.args]
            return self.env.filters[node.name](value, *args)
        if isinstance(node, Not):
            return not self.eval(node.operand, ctx)
        if isinstance(node, And):
            return self.eval(node.left, ctx) and self.eval(node.right, ctx)
        if isinstance(node, Or):
            return self.eval(node.left, ctx) or self.eval(node.right, ctx)
        if isinstance(node, Compare):
            left = self.eval(node.left, ctx)
            right = self.eval(node.right, ctx)
            try:
                return _COMPARE[node.op](left, right)
            except TypeError:
                raise TemplateError(f"cannot compare {left!r} {node.op} {right!r}") from None
        raise TypeError(f"unknown expression {node!r}")  # pragma: no cover
