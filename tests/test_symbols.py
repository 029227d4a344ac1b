"""Functions by name (coderl.agents.symbols) and applying a unified diff (coderl.tasks.patching)."""

from __future__ import annotations

import pytest

from coderl.agents import symbols
from coderl.tasks.patching import apply_file_diff

SOURCE = '''import functools


def top(x):
    return x


class Box:
    @functools.cache
    def get(self, key):
        """Docs."""
        return key

    def put(self, key):
        def inner():
            return key
        return inner


def get(y):
    return -y
'''


def test_functions_are_found_by_qualified_or_bare_name() -> None:
    assert [(f.qualname, f.first, f.last) for f in symbols.functions(SOURCE)] == [
        ("top", 4, 5), ("Box.get", 9, 12), ("Box.put", 14, 17), ("Box.put.inner", 15, 16), ("get", 20, 21)
    ]  # fmt: skip
    assert [f.qualname for f in symbols.named(SOURCE, "Box.get")] == ["Box.get"]
    assert [f.qualname for f in symbols.named(SOURCE, "get")] == ["get"]  # the exact name wins
    assert [f.qualname for f in symbols.named(SOURCE, "inner")] == ["Box.put.inner"]
    assert symbols.named(SOURCE, "missing") == []
    # after a module path, as tests and issue texts call a library's functions (humanize.natural_list)
    assert [f.qualname for f in symbols.named(SOURCE, "mylib.get")] == ["get"]
    assert [f.qualname for f in symbols.named(SOURCE, "mylib.boxes.Box.get")] == ["Box.get"]
    assert [f.qualname for f in symbols.named(SOURCE, "mylib.inner")] == ["Box.put.inner"]
    assert symbols.named(SOURCE, "Crate.get") == []  # a class's name is not a module path: no other get
    assert symbols.named(SOURCE, "mylib.Crate.get") == []
    assert [f.qualname for f in symbols.named(SOURCE, "PIL.top")] == ["top"]  # an upper-case module
    assert symbols.named(SOURCE, "put.inner") == []  # put is a function here, not a module: no other inner
    assert symbols.named(SOURCE, "top.get") == []
    assert symbols.named(SOURCE, "mylib..get") == [] and symbols.named(SOURCE, ".get") == []
    box_get = symbols.named(SOURCE, "Box.get")[0]
    assert box_get.text(SOURCE) == '    @functools.cache\n    def get(self, key):\n        """Docs."""\n        return key\n'
    with pytest.raises(SyntaxError):
        symbols.functions("def broken(:\n")


def test_replacing_a_function_keeps_the_rest_of_the_file() -> None:
    top = symbols.named(SOURCE, "top")[0]
    new = symbols.replace_function(SOURCE, top, "def top(x):\n    return x + 1")
    assert new == SOURCE.replace("    return x\n", "    return x + 1\n", 1)
    last = symbols.named(SOURCE, "get")[0]
    assert symbols.replace_function(SOURCE, last, "def get(y):\n    return y\n").endswith("def get(y):\n    return y\n")


METHOD = '''    @functools.cache
    def get(self, key):
        """Get a key.

        >>> Box().get(1)
        1
        """  # the docs
        # look it up
        return key
'''


def test_a_function_written_without_its_docstring_keeps_it() -> None:
    assert symbols.docstring_span(METHOD) == (2, 7)  # lines of its own, a trailing comment with them
    bare = symbols.without_docstring(METHOD)
    assert bare == METHOD.replace(METHOD[METHOD.index("        \"\"\"Get") : METHOD.index("        # look")], "")
    fixed = "    @functools.cache\n    def get(self, key):\n        # look it up\n        return key + 1"
    kept = symbols.keep_docstring(METHOD, fixed)  # before the comments above the body: right after the def
    assert kept == METHOD.replace("return key\n", "return key + 1")
    assert symbols.keep_docstring(METHOD, bare) == METHOD
    spaced = 'def f(x):\n    """Docs."""\n    # a note\n\n    # on the body\n    return x\n'  # right after the signature
    assert symbols.keep_docstring(spaced, symbols.without_docstring(spaced)) == spaced
    # re-indented to the new body, a helper before it left alone; a docstring of its own wins
    assert symbols.keep_docstring(METHOD, "def helper():\n  pass\n\ndef get(self, key):\n  return 2\n") == (
        'def helper():\n  pass\n\ndef get(self, key):\n  """Get a key.\n\n  >>> Box().get(1)\n  1\n  """  # the docs\n'
        "  return 2\n"
    )
    assert symbols.keep_docstring(METHOD, 'def get(self, key):\n    """New."""\n    return 2\n') is None
    for nowhere in ("def get(self, key): return 2", "def other(key):\n    return 2", "def get(:", "x = 1"):
        assert symbols.keep_docstring(METHOD, nowhere) is None, nowhere
    # nothing to keep: no docstring, or one that shares its line with code
    for old in ("def get(key):\n    return key\n", 'def get(key):\n    "Doc."; return key\n', 'def get(key): "Doc."\n'):
        assert symbols.docstring_span(old) is None and symbols.keep_docstring(old, "def get(key):\n    pass") is None
    only = 'def get(key):\n    """Only docs."""\n'
    assert symbols.docstring_span(only) == (1, 2) and symbols.without_docstring(only) == only  # it would not parse


DIFF = """--- a/m.py
+++ b/m.py
@@ -1,3 +1,3 @@
 a = 1
-b = 2
+b = 3
 c = 3
@@ -5,2 +5,4 @@ def f():
 e = 5
+f = 6
+g = 7
 h = 8
"""


def test_a_unified_diff_applies_with_its_context_checked() -> None:
    old = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\nh = 8\ni = 9\n"
    assert apply_file_diff(old, DIFF) == "a = 1\nb = 3\nc = 3\nd = 4\ne = 5\nf = 6\ng = 7\nh = 8\ni = 9\n"
    with pytest.raises(ValueError, match="does not match line 2: 'b = 2'"):
        apply_file_diff(old.replace("b = 2", "b = 0"), DIFF)
    insert_at_top = "--- a/m.py\n+++ b/m.py\n@@ -0,0 +1 @@\n+top = 0\n"
    assert apply_file_diff("x = 1\n", insert_at_top) == "top = 0\nx = 1\n"
