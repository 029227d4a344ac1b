import pytest

from tinytpl import (
    ChoiceLoader,
    DictLoader,
    Environment,
    FunctionLoader,
    Markup,
    TemplateError,
    TemplateNotFound,
    TemplateSyntaxError,
    escape,
    render,
    select_autoescape,
)


# -- output and lookups ----------------------------------------------------------------------


def test_plain_text_passes_through():
    assert render("just text\n") == "just text\n"


def test_variable_output():
    assert render("Hello {{ name }}!", name="World") == "Hello World!"


def test_dotted_lookup_on_dicts_and_objects():
    class User:
        def __init__(self):
            self.name = "ada"

    assert render("{{ u.name }}", u=User()) == "ada"
    assert render("{{ u.address.city }}", u={"address": {"city": "Paris"}}) == "Paris"


def test_index_lookup():
    assert render("{{ xs.0 }}-{{ xs.2 }}", xs=["a", "b", "c"]) == "a-c"


def test_undefined_renders_empty():
    assert render("[{{ missing }}][{{ missing.attr.deeper }}]") == "[][]"


def test_none_renders_empty():
    assert render("[{{ x }}]", x=None) == "[]"


def test_private_attributes_are_not_exposed():
    class Thing:
        _secret = "s3cret"

    assert render("[{{ t._secret }}]", t=Thing()) == "[]"


def test_literals():
    assert render("{{ 'single' }} {{ \"double\" }} {{ 42 }} {{ 1.5 }}") == "single double 42 1.5"


def test_string_literal_escapes():
    assert render('{{ "a\\tb" }}') == "a\tb"


def test_render_accepts_mapping_and_kwargs():
    env = Environment()
    tmpl = env.from_string("{{ a }}{{ b }}")
    assert tmpl.render({"a": 1}, b=2) == "12"


# -- filters -----------------------------------------------------------------------------------


def test_simple_filters():
    assert render("{{ s|upper }}", s="abc") == "ABC"
    assert render("{{ s|lower }}", s="ABC") == "abc"
    assert render("{{ s|title }}", s="hello world") == "Hello World"
    assert render("{{ s|capitalize }}", s="hello World") == "Hello world"
    assert render("[{{ s|trim }}]", s="  x  ") == "[x]"


def test_filter_chain():
    assert render("{{ s|trim|upper }}", s="  hi ") == "HI"


def test_default_filter():
    assert render('{{ missing|default:"n/a" }}') == "n/a"
    assert render('{{ x|default:"n/a" }}', x=None) == "n/a"
    assert render('{{ x|default:"n/a" }}', x="") == ""
    assert render('{{ x|default:"n/a",true }}', x="") == "n/a"


def test_join_and_length():
    assert render('{{ xs|join:", " }}', xs=[1, 2, 3]) == "1, 2, 3"
    assert render("{{ xs|length }}", xs=[1, 2, 3]) == "3"


def test_join_separator_containing_pipe_and_colon():
    assert render('{{ xs|join:" | " }}', xs="ab") == "a | b"
    assert render('{{ xs|join:":" }}', xs="ab") == "a:b"


def test_truncate():
    assert render("{{ s|truncate:8 }}", s="hello world") == "hello..."
    assert render("{{ s|truncate:20 }}", s="hello world") == "hello world"


def test_first_last_reverse_sort():
    assert render("{{ xs|first }}{{ xs|last }}", xs=[3, 1, 2]) == "32"
    assert render("{{ xs|sort|join }}", xs=[3, 1, 2]) == "123"
    assert render("{{ xs|reverse|join }}", xs=[3, 1, 2]) == "213"


def test_int_and_replace():
    assert render("{{ s|int }}", s="12") == "12"
    assert render("{{ s|int }}", s="nope") == "0"
    assert render('{{ s|replace:"a","o" }}', s="banana") == "bonono"


def test_unknown_filter_is_a_syntax_error():
    with pytest.raises(TemplateSyntaxError, match="unknown filter 'uppr'"):
        render("{{ x|uppr }}")


def test_custom_filter():
    env = Environment(filters={"double": lambda v: v * 2})
    assert env.from_string("{{ n|double }}").render(n=21) == "42"


# -- autoescaping ---------------------------------------------------------------------------


def test_autoescape_is_on_by_default():
    assert render("{{ x }}", x="<b>Tom & Jerry</b>") == "&lt;b&gt;Tom &amp; Jerry&lt;/b&gt;"


def test_autoescape_single_quote():
    assert render("{{ x }}", x="it's") == "it&#39;s"


def test_safe_filter_and_markup():
    assert render("{{ x|safe }}", x="<b>bold</b>") == "<b>bold</b>"
    assert render("{{ x }}", x=Markup("<i>ok</i>")) == "<i>ok</i>"


def test_string_filters_keep_safe_values_safe():
    assert render("{{ x|safe|upper }}", x="<b>hi</b>") == "<B>HI</B>"


def test_escape_does_not_double_escape_markup():
    assert escape(escape("<")) == "&lt;"


def test_autoescape_can_be_disabled():
    env = Environment(autoescape=False)
    assert env.from_string("{{ x }}").render(x="<b>") == "<b>"


def test_select_autoescape_policy_for_named_strings():
    env = Environment(autoescape=select_autoescape(["html"]))
    assert env.from_string("{{ x }}", name="a.html").render(x="<") == "&lt;"
    assert env.from_string("{{ x }}", name="a.txt").render(x="<") == "<"
    assert env.from_string("{{ x }}").render(x="<") == "&lt;"


# -- if -------------------------------------------------------------------------------------------


def test_if_else():
    tpl = "{% if user %}hi {{ user }}{% else %}anonymous{% endif %}"
    assert render(tpl, user="bob") == "hi bob"
    assert render(tpl) == "anonymous"


def test_elif_chain():
    tpl = "{% if n > 10 %}big{% elif n > 5 %}medium{% elif n > 0 %}small{% else %}none{% endif %}"
    assert [render(tpl, n=n) for n in (20, 7, 1, 0)] == ["big", "medium", "small", "none"]


def test_boolean_operators():
    tpl = "{% if a and b %}both{% elif a or b %}one{% else %}neither{% endif %}"
    assert render(tpl, a=1, b=1) == "both"
    assert render(tpl, a=0, b=1) == "one"
    assert render(tpl, a=0, b=0) == "neither"


def test_not_operator_on_a_plain_value():
    assert render("{% if not items %}empty{% endif %}", items=[]) == "empty"
    assert render("{% if not items %}empty{% endif %}", items=[1]) == ""


def test_comparisons():
    assert render("{% if name == 'bob' %}yes{% endif %}", name="bob") == "yes"
    assert render("{% if name != 'bob' %}yes{% endif %}", name="bob") == ""
    assert render("{% if 'a' in word %}yes{% endif %}", word="cat") == "yes"
    assert render("{% if 'z' not in word %}yes{% endif %}", word="cat") == "yes"
    assert render("{% if n >= 3 %}yes{% endif %}", n=3) == "yes"


def test_parentheses():
    assert render("{% if (a or b) and c %}yes{% endif %}", a=0, b=1, c=1) == "yes"


def test_compare_incompatible_types_raises_template_error():
    with pytest.raises(TemplateError, match="cannot compare"):
        render("{% if x > 1 %}{% endif %}", x="a")


# -- for --------------------------------------------------------------------------------------


def test_for_loop():
    assert render("{% for x in xs %}[{{ x }}]{% endfor %}", xs=[1, 2, 3]) == "[1][2][3]"


def test_loop_index_and_first():
    tpl = "{% for x in xs %}{% if loop.first %}>{% endif %}{{ loop.index }}{{ x }}{% endfor %}"
    assert render(tpl, xs="ab") == ">1a2b"


def test_loop_index0_length_revindex():
    tpl = "{% for x in xs %}{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex }} {% endfor %}"
    assert render(tpl, xs="abc") == "0/3/3 1/3/2 2/3/1 "


def test_for_else():
    tpl = "{% for x in xs %}{{ x }}{% else %}nothing{% endfor %}"
    assert render(tpl, xs=[]) == "nothing"
    assert render(tpl) == "nothing"
    assert render(tpl, xs=[1]) == "1"


def test_for_tuple_unpacking():
    tpl = "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}"
    assert render(tpl, d={"a": 1, "b": 2}) == "a=1;b=2;"


def test_for_over_generator():
    assert render("{% for x in xs %}{{ x }}{% endfor %}", xs=(i * i for i in range(4))) == "0149"


def test_for_over_non_iterable_raises():
    with pytest.raises(TemplateError, match="not iterable"):
        render("{% for x in n %}{% endfor %}", n=5)


def test_set():
    assert render("{% set greeting = 'hi' %}{{ greeting|upper }}") == "HI"


# -- whitespace control and comments ----------------------------------------------------------


def test_comments_are_dropped():
    assert render("a{# a comment #}b") == "ab"


def test_multiline_comment_is_dropped():
    assert render("a{# one\ntwo\nthree #}b") == "ab"


def test_whitespace_control_before_tag():
    assert render("a   \n  {{- x }}", x="b") == "ab"
    assert render("<ul>\n  {%- for x in xs %}<li>{{ x }}</li>{% endfor %}", xs="ab") == "<ul><li>a</li><li>b</li>"


def test_whitespace_control_after_tag_on_one_line():
    assert render("{{ x -}}   b", x="a") == "ab"


def test_comment_whitespace_control():
    assert render("a  {#- note #}b") == "ab"


# -- includes and loaders ---------------------------------------------------------------------


def test_include_sees_current_variables():
    env = Environment(loader=DictLoader({"main": "[{% include 'part' %}]", "part": "{{ who }}"}))
    assert env.get_template("main").render(who="me") == "[me]"


def test_include_name_from_variable():
    env = Environment(loader=DictLoader({"main": "{% include which %}", "a": "A", "b": "B"}))
    assert env.get_template("main").render(which="b") == "B"


def test_include_inside_loop():
    env = Environment(loader=DictLoader({"main": "{% for i in xs %}{% include 'row' %}{% endfor %}", "row": "<{{ i }}>"}))
    assert env.get_template("main").render(xs=[1, 2]) == "<1><2>"


def test_recursive_include_is_stopped():
    env = Environment(loader=DictLoader({"loop": "x{% include 'loop' %}"}))
    with pytest.raises(TemplateError, match="nested too deeply"):
        env.get_template("loop").render()


def test_missing_template():
    env = Environment(loader=DictLoader({}))
    with pytest.raises(TemplateNotFound):
        env.get_template("nope.html")


def test_get_template_cache_and_refresh():
    mapping = {"t": "one"}
    env = Environment(loader=DictLoader(mapping))
    first = env.get_template("t")
    assert env.get_template("t") is first
    mapping["t"] = "two"
    assert env.get_template("t").render() == "two"


def test_choice_and_function_loaders():
    loader = ChoiceLoader([DictLoader({"a": "from dict"}), FunctionLoader(lambda n: "from func" if n == "b" else None)])
    env = Environment(loader=loader)
    assert env.get_template("a").render() == "from dict"
    assert env.get_template("b").render() == "from func"
    with pytest.raises(TemplateNotFound):
        env.get_template("c")


# -- syntax errors ----------------------------------------------------------------------------


def test_unclosed_variable_tag():
    with pytest.raises(TemplateSyntaxError) as info:
        render("line one\n{{ oops")
    assert info.value.lineno == 2
    assert "unclosed" in info.value.message


def test_unknown_tag_reports_line_and_name():
    env = Environment()
    with pytest.raises(TemplateSyntaxError) as info:
        env.from_string("a\nb\n{% endfro %}", name="page.html")
    assert info.value.lineno == 3
    assert str(info.value) == "page.html, line 3: unknown tag 'endfro'"


def test_unexpected_end_tag():
    with pytest.raises(TemplateSyntaxError, match="unexpected 'endif'"):
        render("{% endif %}")


def test_missing_endfor_reports_opening_line():
    with pytest.raises(TemplateSyntaxError) as info:
        render("\n\n{% for x in xs %}\n{{ x }}\n")
    assert info.value.lineno == 3
    assert "missing 'endfor'" in info.value.message


def test_else_after_else():
    with pytest.raises(TemplateSyntaxError, match="unexpected 'else'"):
        render("{% if a %}{% else %}{% else %}{% endif %}")


def test_bad_expression():
    with pytest.raises(TemplateSyntaxError, match="unexpected"):
        render("{{ a b }}")
    with pytest.raises(TemplateSyntaxError, match="unclosed variable tag"):
        render("{{ 'abc }}")


def test_multiline_tag_line_numbers():
    with pytest.raises(TemplateSyntaxError) as info:
        render("{% if a\n   and b %}\n{% endif %}\n{% bogus %}")
    assert info.value.lineno == 4


def test_empty_tag():
    with pytest.raises(TemplateSyntaxError, match="empty"):
        render("{{ }}")
