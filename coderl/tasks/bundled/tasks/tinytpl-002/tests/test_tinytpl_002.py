from tinytpl import Environment, Markup, escape, render


def test_double_quote_in_attribute_is_escaped():
    assert render('<input value="{{ v }}">', v='a"b') == '<input value="a&quot;b">'
    out = render('<a title="{{ t }}">', t='x" onfocus="alert(1)')
    assert out == '<a title="x&quot; onfocus=&quot;alert(1)">'


def test_escape_function_escapes_double_quote():
    assert escape('"') == "&quot;"
    assert escape('<"&\'>') == "&lt;&quot;&amp;&#39;&gt;"


def test_escape_filter_escapes_double_quote():
    env = Environment(autoescape=False)
    assert env.from_string("{{ v|e }}").render(v='say "hi"') == "say &quot;hi&quot;"


def test_other_characters_still_escaped():
    assert render("{{ v }}", v="<a href='x'>&</a>") == "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;"


def test_safe_values_are_untouched():
    assert render("{{ v|safe }}", v='<a href="x">') == '<a href="x">'
    assert render("{{ v }}", v=Markup('"quoted"')) == '"quoted"'
