from tinytpl import DictLoader, Environment, render


def test_outer_loop_restored_after_inner_loop():
    tpl = "{% for row in rows %}{% for c in row %}{{ c }}{% endfor %}:{{ loop.index }} {% endfor %}"
    assert render(tpl, rows=[[1, 2, 3], [4]]) == "123:1 4:2 "
    tpl = "{% for a in xs %}{% for b in ys %}{% endfor %}{% if loop.last %}end{% endif %}{% endfor %}"
    assert render(tpl, xs=[1, 2], ys=[1, 2, 3]) == "end"


def test_inner_loop_variable_not_visible_after_inner_loop():
    tpl = "{% for a in xs %}{% for inner_b5 in ys %}{% endfor %}[{{ inner_b5 }}]{% endfor %}"
    assert render(tpl, xs=[1, 2], ys=["x", "y"]) == "[][]"


def test_loop_variables_do_not_leak_into_later_renders():
    render("{% for user_t5 in users %}{{ user_t5 }}{% endfor %}", users=["alice", "bob"])
    out = render("{% for i in items %}{{ user_t5 }} {% endfor %}", items=[1, 2], user_t5="carol")
    assert out == "carol carol "


def test_set_in_loop_does_not_leak_into_later_renders():
    env = Environment()
    env.from_string("{% for i in xs %}{% set secret_t5 = 'leaked' %}{% endfor %}").render(xs=[1])
    out = env.from_string("{% for i in xs %}[{{ secret_t5 }}]{% endfor %}").render(xs=[1])
    assert out == "[]"


def test_include_scope_does_not_leak_into_loop():
    env = Environment(loader=DictLoader({
        "part": "{% set color_t5 = 'red' %}{{ color_t5 }}",
        "main": "{% include 'part' %}{% for i in xs %}/{{ color_t5 }}{% endfor %}",
    }))
    assert env.get_template("main").render(xs=[1], color_t5="blue") == "red/blue"


def test_single_loop():
    assert render("{% for x in xs %}{{ loop.index }}{{ x }}{% endfor %}", xs="ab") == "1a2b"


def test_nested_loops_inner_values():
    tpl = "{% for a in xs %}{% for b in ys %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{% endfor %}"
    assert render(tpl, xs=[1, 2], ys="xy") == "1x1 1y2 2x1 2y2 "


def test_loop_variable_gone_after_loop():
    assert render("{% for only_t5 in xs %}{% endfor %}[{{ only_t5 }}]", xs=[1]) == "[]"
