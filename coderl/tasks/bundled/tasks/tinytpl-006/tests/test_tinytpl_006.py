import pytest

from tinytpl import render


def _truth(expr, **ctx):
    return render("{% if " + expr + " %}T{% else %}F{% endif %}", **ctx)


def test_not_applies_to_whole_comparison():
    tpl = '{% if not user.role == "admin" %}<a>Request access</a>{% endif %}'
    assert render(tpl, user={"role": "guest"}) == "<a>Request access</a>"
    assert render(tpl, user={"role": "admin"}) == ""
    assert _truth("not n > 3", n=1) == "T"
    assert _truth("not n > 3", n=5) == "F"


def test_not_with_membership():
    assert render("{% if not tag in tags %}add{% endif %}", tag="x", tags=["y"]) == "add"
    assert render("{% if not tag in tags %}add{% endif %}", tag="y", tags=["y"]) == ""


def test_not_comparison_combined_with_and_or():
    assert _truth("not a == 1 and b", a=2, b=True) == "T"
    assert _truth("a or not b == 'x'", a=False, b="y") == "T"


def test_not_on_plain_value():
    assert _truth("not items", items=[]) == "T"
    assert _truth("not items", items=[0]) == "F"


@pytest.mark.parametrize("a, b, expected", [(0, 1, "T"), (1, 1, "F"), (0, 0, "F")], ids=["not-0-and-1", "not-1-and-1", "not-0-and-0"])
def test_not_binds_tighter_than_and_or(a, b, expected):
    assert _truth("not a and b", a=a, b=b) == expected


def test_double_not():
    assert _truth("not not a", a=1) == "T"


def test_not_in_operator():
    assert _truth("'z' not in word", word="abc") == "T"


def test_parenthesised_not():
    assert _truth("(not a) == b", a=True, b=False) == "T"
