from tinytpl import render


def test_separator_skipped_after_last_item():
    tpl = "{% for x in xs %}{{ x }}{% if not loop.last %}, {% endif %}{% endfor %}"
    assert render(tpl, xs=[1, 2, 3]) == "1, 2, 3"
    assert render(tpl, xs=["a", "b"]) == "a, b"


def test_last_flags_per_iteration():
    tpl = "{% for x in xs %}{% if loop.last %}L{% else %}-{% endif %}{% endfor %}"
    assert render(tpl, xs=range(5)) == "----L"


def test_single_item_is_first_and_last():
    tpl = "{% for x in xs %}{{ loop.first }}/{{ loop.last }}{% endfor %}"
    assert render(tpl, xs=["only"]) == "True/True"


def test_first_and_index_unchanged():
    tpl = "{% for x in xs %}{% if loop.first %}^{% endif %}{{ loop.index }}{% endfor %}"
    assert render(tpl, xs="abc") == "^123"


def test_empty_loop_renders_else():
    assert render("{% for x in xs %}{{ loop.last }}{% else %}none{% endfor %}", xs=[]) == "none"
