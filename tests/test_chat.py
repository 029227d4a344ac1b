"""Chat layer: rendering through the real template, token-space appends, tool-call parsing."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from coderl.chat import ChatFormat, parse_completion
from coderl.chat.parse import opens_tool_name
from coderl.engine.params import ExpectName
from coderl.engine.stops import name_verdict
from coderl.errors import ChatError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def chat(tokenizer: Any) -> ChatFormat:
    return ChatFormat(tokenizer)


def test_render_matches_the_models_own_template(chat: ChatFormat, tokenizer: Any) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    expected = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert chat.render(messages) == list(expected)


def test_append_equals_full_render_when_ids_are_canonical(chat: ChatFormat) -> None:
    """For a completion whose ids are the canonical encoding, appending == rendering the whole thing."""
    start = [{"role": "user", "content": "Run ls"}]
    prompt = chat.render(start, TOOLS)
    reply = 'Sure.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
    completion = chat.encode(reply) + [chat.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    tool_msg = {"role": "tool", "tool_call_id": "call_0", "content": "a.py\nb.py"}
    appended = prompt + completion + chat.append(completion, [tool_msg], TOOLS)
    assistant = {
        "role": "assistant",
        "content": "Sure.",
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    full = chat.render([*start, assistant, tool_msg], TOOLS)
    assert appended == full


def test_truncated_completion_gets_the_whole_turn_closer(chat: ChatFormat) -> None:
    end = chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert chat.turn_suffix([5, 6, end]) == chat.encode("\n")
    assert chat.turn_suffix([5, 6]) == [end, *chat.encode("\n")]


def test_decode_reencode_changes_ids_but_token_space_does_not(chat: ChatFormat, tokenizer: Any) -> None:
    """A real example from this tokenizer: ids a model can sample that do not survive decode -> encode."""
    canonical = tokenizer.encode("import numpy", add_special_tokens=False)
    # the same text split differently: one token per character, which a sampler can produce
    split = [tokenizer.convert_tokens_to_ids(ch) for ch in "import"] + tokenizer.encode(
        " numpy", add_special_tokens=False
    )
    assert tokenizer.decode(split) == tokenizer.decode(canonical) == "import numpy"
    assert tokenizer.encode(tokenizer.decode(split), add_special_tokens=False) != split

    prompt = chat.render([{"role": "user", "content": "Write an import"}])
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    completion = [*split, end]
    user = {"role": "user", "content": "thanks"}
    ours = prompt + completion + chat.append(completion, [user])
    rerendered = chat.render(
        [
            {"role": "user", "content": "Write an import"},
            {"role": "assistant", "content": tokenizer.decode(split)},
            user,
        ]
    )
    assert ours[: len(prompt) + len(completion)] == prompt + completion  # sampled ids kept exactly
    assert rerendered != ours  # the text round trip re-tokenizes what the model sampled
    assert rerendered[len(prompt) : len(prompt) + len(canonical)] == canonical


def test_tools_are_described_in_the_system_turn(chat: ChatFormat) -> None:
    text = chat.render_text(
        [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "go"}], TOOLS
    )
    assert text.startswith("<|im_start|>system\nYou fix bugs.")
    assert '"name": "bash"' in text and "<tool_call>" in text
    assert not chat.native_tools


def test_consecutive_tool_results_share_one_user_turn(chat: ChatFormat) -> None:
    delta = chat.decode(
        chat.render_delta(
            [
                {"role": "tool", "tool_call_id": "a", "content": "one"},
                {"role": "tool", "tool_call_id": "b", "content": "two"},
            ]
        )
    )
    assert delta.count("user") == 1 and "<tool_response>\none\n</tool_response>" in delta and "two" in delta


def test_native_tool_template_gets_tools_and_object_arguments(tokenizer: Any) -> None:
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (
        "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}<|im_end|>\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function.arguments | tojson }}</tool_call>"
        "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    chat = ChatFormat(tok)
    assert chat.native_tools
    msgs = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
    ]
    text = chat.render_text(msgs, TOOLS)
    assert "TOOLS:bash;" in text and '<tool_call>{"command": "ls"}</tool_call>' in text


def test_a_developer_message_renders_as_system_where_the_template_has_no_such_role(tokenizer: Any) -> None:
    """Codex sends its instructions as developer messages: a Qwen-like template that renders only the
    roles it knows dropped them silently; a template that knows the role keeps it."""
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (
        "{% for m in messages %}{% if m.role in ['system', 'user', 'assistant'] %}<|im_start|>{{ m.role }}\n"
        "{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    msgs = [{"role": "developer", "content": "follow the repo's rules"}, {"role": "user", "content": "x"}]
    chat = ChatFormat(tok)
    assert not chat.developer_role
    assert chat.render_text(msgs).startswith("<|im_start|>system\nfollow the repo's rules<|im_end|>")
    tok.chat_template = tok.chat_template.replace("'assistant']", "'assistant', 'developer']")
    knows = ChatFormat(tok)
    assert knows.developer_role and knows.render_text(msgs).startswith("<|im_start|>developer\n")


def test_template_errors_are_chat_errors(chat: ChatFormat) -> None:
    with pytest.raises(ChatError, match="empty"):
        chat.render([])
    with pytest.raises(ChatError, match="not valid JSON"):
        chat.render(
            [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}],
                }
            ]
        )
    with pytest.raises(ChatError, match="OpenAI tool schema"):
        chat.render([{"role": "user", "content": "x"}], tools=[42])  # type: ignore[list-item]


# ---------------------------------------------------------------- parsing


def test_hermes_calls_parsed_with_content() -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>\n<tool_call>{"name": "submit", "arguments": "{}"}</tool_call>'
    p = parse_completion(text, "hermes")
    assert p.content == "Let me look."
    assert [(c.name, c.arguments) for c in p.tool_calls] == [("bash", {"command": "ls -la"}), ("submit", {})]
    assert [c.id for c in p.tool_calls] == ["call_0", "call_1"] and not p.errors
    assert json.loads(p.tool_calls[0].to_openai()["function"]["arguments"]) == {"command": "ls -la"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('<tool_call>{"name": bash}</tool_call>', "not valid JSON"),
        ('<tool_call>["bash"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "no string 'name'"),
        ('<tool_call>{"name": "bash", "arguments": 3}</tool_call>', "not a JSON object"),
        ('<tool_call>{"name": "bash", "arguments": "{bad"}</tool_call>', "not a JSON object"),
        ('<tool_call>{"name": "bash", "arguments": {"command": "ls"', "closing </tool_call> tag is missing"),
        ("<tool_call></tool_call>", "not valid JSON"),
    ],
)
def test_malformed_hermes_calls_become_errors(text: str, fragment: str) -> None:
    p = parse_completion(text, "hermes")
    assert p.tool_calls == [] and len(p.errors) == 1 and fragment in p.errors[0]
    assert "expected" in p.errors[0]


def test_unterminated_but_valid_call_is_accepted() -> None:
    p = parse_completion('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}', "hermes")
    assert p.tool_calls[0].arguments == {"command": "ls"} and not p.errors


def test_json_fallback_finds_fenced_and_bare_calls() -> None:
    text = 'I will run it.\n```json\n{"name": "bash", "arguments": {"command": "pytest"}}\n```\nthen {"name": "submit", "parameters": {}}'
    p = parse_completion(text, "json")
    assert [c.name for c in p.tool_calls] == ["bash", "submit"]
    assert "I will run it." in p.content and "pytest" not in p.content
    assert parse_completion('{"a": 1} no calls here', "json").tool_calls == []


def test_auto_picks_the_format_and_plain_text_has_no_calls() -> None:
    assert parse_completion('<tool_call>{"name": "a", "arguments": {}}</tool_call>').tool_calls[0].name == "a"
    assert parse_completion('{"name": "b", "arguments": {}}').tool_calls[0].name == "b"
    plain = parse_completion("Just an answer, no tools.")
    assert plain.content == "Just an answer, no tools." and not plain.tool_calls and not plain.errors


def test_parse_from_ids(chat: ChatFormat) -> None:
    end = chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = chat.encode('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>') + [end]
    assert chat.parse(ids).tool_calls[0].arguments == {"command": "ls"}


# ---------------------------------------------------------------- Qwen3-Coder's XML calls


def test_xml_calls_keep_raw_values() -> None:
    code = 'def f(x):\n    return "a\\\\b" if x else {}\n'
    text = (
        "I will fix it.\n<tool_call>\n<function=replace_function>\n<parameter=path>\nsrc/a.py\n</parameter>\n"
        f"<parameter=text>\n{code}</parameter>\n</function>\n</tool_call>"
    )
    for fmt in ("xml", "auto"):
        p = parse_completion(text, fmt)  # type: ignore[arg-type]
        assert p.content == "I will fix it." and not p.errors
        assert [(c.name, c.arguments) for c in p.tool_calls] == [
            ("replace_function", {"path": "src/a.py", "text": code.rstrip("\n")})
        ]
    bare = parse_completion("<tool_call>\n<function=submit>\n</function>\n</tool_call>", "xml")
    assert bare.tool_calls[0].name == "submit" and bare.tool_calls[0].arguments == {}
    # auto still reads a JSON body as Hermes
    assert parse_completion('<tool_call>{"name": "a", "arguments": {}}</tool_call>').tool_calls[0].name == "a"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call>', "does not start with <function=NAME>"),
        ("<tool_call>\n<function=>\n</function>\n</tool_call>", "empty function name"),
        ("<tool_call>\n<function=view>\n<parameter=path>\na.py\n</parameter>\n</tool_call>", "missing </function>"),
        ("<tool_call>\n<function=view>\n<parameter=path>\na.py\n</function>\n</tool_call>", "missing </parameter>"),
        ("<tool_call>\n<function=view>\npath: a.py\n</function>\n</tool_call>", "outside any <parameter"),
    ],
)
def test_malformed_xml_calls_become_errors(text: str, fragment: str) -> None:
    p = parse_completion(text, "xml")
    assert p.tool_calls == [] and len(p.errors) == 1 and fragment in p.errors[0], p.errors
    assert "<parameter=KEY>value</parameter>" in p.errors[0]


def test_xml_format_shows_and_renders_calls_as_xml(tokenizer: Any) -> None:
    chat = ChatFormat(tokenizer, "xml")
    tools = [{"type": "function", "function": {"name": "view", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]  # fmt: skip
    call = {"id": "c0", "type": "function", "function": {"name": "view", "arguments": '{"path": "a.py"}'}}
    text = chat.render_text(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}],
        tools,
        add_generation_prompt=False,
    )
    example = "<tool_call>\n<function=view>\n<parameter=path>\n...\n</parameter>\n</function>\n</tool_call>"
    assert example in text  # the system turn's example is a real call in this format
    assert "<tool_call>\n<function=view>\n<parameter=path>\na.py\n</parameter>\n</function>\n</tool_call>" in text
    assert '{"name": "view", "arguments"' not in text
    parsed = chat.parse(chat.encode(text.split("<|im_start|>assistant\n")[-1]))
    assert parsed.tool_calls[0].arguments == {"path": "a.py"}


@pytest.mark.parametrize(
    ("reply", "wrong"),
    [
        ("submit>\n</function>\n</tool_call>", False),
        (" submit\t>\n</function>\n</tool_call>", False),
        ("show_function>\n<parameter=name>\nf\n</parameter>\n</function>\n</tool_call>", False),
        ("submitted>\n</function>\n</tool_call>", True),
        ("sub mit>\n</function>\n</tool_call>", True),
        ("submit\n>\n</function>\n</tool_call>", True),
        ("test_show_function>\n</function>\n</tool_call>", True),
        ("show_function x>\n</function>\n</tool_call>", True),
        (">\n</function>\n</tool_call>", True),
    ],
)
def test_a_tool_name_goes_wrong_exactly_where_the_xml_parser_would_find_no_offered_tool(
    reply: str, wrong: bool
) -> None:
    """The engine's name check (SamplingParams.expect_name) departs on some prefix of a reply iff
    the parser reads its first call as no offered tool; once it decides, longer prefixes agree."""
    expect = ExpectName(names=["show_function", "submit"])
    verdicts = [name_verdict(reply[:n], expect) for n in range(1, len(reply) + 1)]
    decided = [v for v in verdicts if v != "pending"]
    assert decided and set(decided) == {"departed" if wrong else "met"}
    parsed = parse_completion("<tool_call>\n<function=" + reply, "xml")
    offered = not parsed.errors and parsed.tool_calls[0].name in expect.names
    assert offered is not wrong
    # a character whose bytes are split across tokens decodes as U+FFFD until its last byte comes
    assert name_verdict("submit\ufffd", expect) == "pending" == name_verdict("\ufffd", expect)
    assert name_verdict("submit\u2003>", expect) == "met"  # str.strip() takes a wide space, as the parser does


def test_only_a_prefix_ending_at_the_first_calls_function_name_leaves_the_name_to_the_model() -> None:
    assert opens_tool_name("<tool_call>\n<function=", "xml") and opens_tool_name("<tool_call><function=", "auto")
    assert not opens_tool_name("<tool_call>\n<function=", "hermes")  # hermes reads JSON in the block
    assert not opens_tool_name("<tool_call>\n", "xml") and not opens_tool_name("", "xml")
    assert not opens_tool_name("<tool_call>\n<function=submit>\n</function>\n</tool_call>\n<tool_call>\n<function=", "xml")
