"""Build the node tree from lexer tokens."""

from __future__ import annotations

from collections.abc import Container

from .errors import TemplateSyntaxError
from .expr import ExprParser
from .lexer import BLOCK, TEXT, Token
from .nodes import For, If, Include, Node, Output, Set, Text

_END_TAGS = frozenset({"elif", "else", "endif", "endfor"})


class Parser:
    def __init__(self, tokens: list[Token], name: str | None = None, filters: Container[str] = ()):
        self.tokens = tokens
        self.name = name
        self.filters = filters
        self.pos = 0
        self._handlers = {
            "if": self._parse_if,
            "for": self._parse_for,
            "set": self._parse_set,
            "include": self._parse_include,
        }

    def parse(self) -> list[Node]:
        body, _ = self._subparse(())
        return body

    def _fail(self, message: str, lineno: int) -> None:
        raise TemplateSyntaxError(message, lineno, self.name)

    def _expr(self, tok: Token) -> ExprParser:
        return ExprParser(tok.value, tok.lineno, self.name, self.filters)

    def _subparse(self, end_tags: tuple[str, ...]):
        """Parse nodes up to a block tag named in ``end_tags``.

        Returns ``(body, (tag_name, expr_parser, token))``, or ``(body, None)`` at end of input.
        """
        body: list[Node] = []
        while self.pos < len(self.tokens):
            tok = self.tokens[self.pos]
            self.pos += 1
            if tok.kind == TEXT:
                body.append(Text(tok.value))
                continue
            stream = self._expr(tok)
            if tok.kind != BLOCK:
                expr = stream.parse_expression()
                stream.expect_end()
                body.append(Output(expr, tok.lineno))
                continue
            tag = stream.expect_name("a tag name")
            if tag in end_tags:
                return body, (tag, stream, tok)
            handler = self._handlers.get(tag)
            if handler is None:
                if tag in _END_TAGS:
                    self._fail(f"unexpected '{tag}'", tok.lineno)
                self._fail(f"unknown tag '{tag}'", tok.lineno)
            body.append(handler(stream, tok))
        return body, None

    def _parse_body(self, opening: Token, what: str, end_tags: tuple[str, ...]):
        body, end = self._subparse(end_tags)
        if end is None:
            self._fail(f"unclosed '{what}' (missing '{end_tags[-1]}')", opening.lineno)
        return body, end

    def _parse_if(self, stream: ExprParser, tok: Token) -> If:
        condition = stream.parse_expression()
        stream.expect_end()
        branches = []
        else_body: list[Node] = []
        while True:
            body, (tag, end_stream, _) = self._parse_body(tok, "if", ("elif", "else", "endif"))
            branches.append((condition, body))
            if tag == "elif":
                condition = end_stream.parse_expression()
                end_stream.expect_end()
                continue
            end_stream.expect_end()
            if tag == "else":
                else_body, (_, end_stream, _) = self._parse_body(tok, "if", ("endif",))
                end_stream.expect_end()
            return If(branches, else_body)

    def _parse_for(self, stream: ExprParser, tok: Token) -> For:
        targets = [stream.expect_name("a loop variable")]
        while stream.skip_op(","):
            targets.append(stream.expect_name("a loop variable"))
        if not stream.skip_keyword("in"):
            stream.fail("expected 'in' after the loop variable")
        iterable = stream.parse_expression()
        stream.expect_end()
        body, (tag, end_stream, _) = self._parse_body(tok, "for", ("else", "endfor"))
        end_stream.expect_end()
        else_body: list[Node] = []
        if tag == "else":
            else_body, (_, end_stream, _) = self._parse_body(tok, "for", ("endfor",))
            end_stream.expect_end()
        return For(targets, iterable, body, else_body, tok.lineno)

    def _parse_set(self, stream: ExprParser, tok: Token) -> Set:
        name = stream.expect_name("a variable name")
        stream.expect_op("=")
        expr = stream.parse_expression()
        stream.expect_end()
        return Set(name, expr)

    def _parse_include(self, stream: ExprParser, tok: Token) -> Include:
        expr = stream.parse_expression()
        stream.expect_end()
        return Include(expr, tok.lineno)


def parse(tokens: list[Token], name: str | None = None, filters: Container[str] = ()) -> list[Node]:
    return Parser(tokens, name, filters).parse()
