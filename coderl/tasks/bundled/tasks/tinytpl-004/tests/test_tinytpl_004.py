import pytest

from tinytpl import Environment, TemplateSyntaxError, render


def _lineno(source):
    with pytest.raises(TemplateSyntaxError) as info:
        Environment().from_string(source, name="t.html")
    return info.value


def test_error_after_multiline_comment():
    src = "{#\n  Page header.\n  Shows the user menu.\n#}\n<h1>{{ title }}</h1>\n{% if user %}\n{% endfi %}\n"
    err = _lineno(src)
    assert err.lineno == 7
    assert str(err) == "t.html, line 7: unknown tag 'endfi'"


def test_several_comments_add_up():
    src = "a {# one\ntwo #} b\n{#-\n\n-#}\n{{ x|nosuchfilter }}"
    assert _lineno(src).lineno == 6


def test_unclosed_block_after_comment_reports_opening_line():
    src = "{# a\nb\nc #}\n{% for x in xs %}\n{{ x }}\n"
    err = _lineno(src)
    assert err.lineno == 4
    assert "missing 'endfor'" in err.message


def test_error_without_comments():
    assert _lineno("a\nb\n\n{% bogus %}").lineno == 4


def test_single_line_comment():
    assert _lineno("{# hi #}\n{# there #}\n{% bogus %}").lineno == 3


def test_comments_still_render_nothing():
    assert render("a{# x\ny #}b{#- z -#} c") == "abc"
