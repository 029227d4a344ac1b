from tinytpl import render


def test_strip_after_block_tag_removes_newlines():
    assert render("{% if x -%}\n\n   yes{% endif %}", x=True) == "yes"


def test_strip_after_variable_tag_removes_newlines():
    assert render("{{ x -}}\nb", x="a") == "ab"
    assert render("{{ x -}}\r\n\t b", x="a") == "ab"


def test_strip_after_comment_removes_newlines():
    assert render("a{# note -#}\n    b") == "ab"


def test_compact_list_template():
    tpl = "<ul>\n{%- for x in xs -%}\n  <li>{{ x }}</li>\n{%- endfor -%}\n</ul>"
    assert render(tpl, xs=[1, 2]) == "<ul><li>1</li><li>2</li></ul>"


def test_strip_before_tag_still_works():
    assert render("a\n\n   {{- x }}", x="b") == "ab"


def test_without_dash_whitespace_is_kept():
    assert render("{% if x %}\n  yes\n{% endif %}", x=True) == "\n  yes\n"


def test_strip_after_tag_with_spaces_only():
    assert render("{{ x -}}   b", x="a") == "ab"
