import pytest

from tinytpl import Environment, TemplateSyntaxError, render


def test_variable_argument_is_looked_up():
    assert render("{{ tags|join:sep }}", tags=["a", "b"], sep=" / ") == "a / b"


def test_dotted_argument():
    assert render("{{ nick|default:user.name }}", user={"name": "Ada"}) == "Ada"
    assert render("{{ nick|default:user.name }}", nick="ada99", user={"name": "Ada"}) == "ada99"
    assert render("[{{ nick|default:user.missing }}]", user={}) == "[]"


def test_numeric_variable_argument():
    assert render("{{ bio|truncate:limit }}", bio="abcdefghijkl", limit=6) == "abc..."
    assert render("{{ bio|truncate:cfg.n,cfg.end }}", bio="abcdefghijkl", cfg={"n": 5, "end": "~"}) == "abcd~"


def test_argument_evaluated_per_render():
    tmpl = Environment().from_string("{{ s|replace:old,new }}")
    assert tmpl.render(s="a-b", old="-", new="+") == "a+b"
    assert tmpl.render(s="a-b", old="a", new="z") == "z-b"


def test_loop_variable_as_argument():
    tpl = "{% for sep in seps %}{{ xs|join:sep }};{% endfor %}"
    assert render(tpl, xs=[1, 2], seps=["-", "+"]) == "1-2;1+2;"


def test_argument_with_its_own_filter():
    assert render("{{ x|default:(fallback|upper) }}", fallback="none") == "NONE"


def test_literal_arguments():
    assert render('{{ xs|join:", " }}', xs=[1, 2]) == "1, 2"
    assert render("{{ s|truncate:4,'!' }}", s="abcdefg") == "abc!"
    assert render("{{ s|truncate:3 }}", s="abc") == "abc"


def test_boolean_literal_argument():
    assert render('{{ x|default:"-",true }}', x=0) == "-"
    assert render('{{ x|default:"-",false }}', x=0) == "0"


def test_unknown_filter_still_rejected():
    with pytest.raises(TemplateSyntaxError, match="unknown filter"):
        render("{{ x|nope:y }}")


def test_custom_filter_with_literal_args():
    env = Environment(filters={"wrap": lambda v, left, right: f"{left}{v}{right}"})
    assert env.from_string("{{ x|wrap:'[',']' }}").render(x="k") == "[k]"
