"""coderl.proxy.render: canonical messages and the mapping of sent-back replies to sampled ids."""

from __future__ import annotations

from typing import Any

import pytest

from coderl.chat import ChatFormat
from coderl.proxy.render import PriorCall, canonical_message, render_prompt, tools_key

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def chat(tokenizer: Any) -> ChatFormat:
    return ChatFormat(tokenizer)


def test_canonical_message_ignores_representation_only() -> None:
    a = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"function": {"name": "f", "arguments": '{"x": 1}'}}],
    }
    b = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "other", "function": {"name": "f", "arguments": {"x": 1}}}],
    }
    assert canonical_message(a) == canonical_message(b)
    assert canonical_message({"role": "user", "content": " hi\n"}) == canonical_message(
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    )
    assert canonical_message({"role": "developer", "content": "s"}) == canonical_message(
        {"role": "system", "content": "s"}
    )
    assert canonical_message({"role": "user", "content": "hi"}) != canonical_message(
        {"role": "user", "content": "ho"}
    )
    assert canonical_message(a) != canonical_message(
        {**a, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}
    )


def test_no_prior_call_renders_from_scratch(chat: ChatFormat) -> None:
    messages = [{"role": "user", "content": "hello"}]
    rendered = render_prompt(chat, messages, None, [])
    assert rendered.prompt_ids == chat.render(messages)
    assert rendered.base_call_id is None


def test_sent_back_reply_maps_to_the_sampled_ids(chat: ChatFormat) -> None:
    first = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hello world"}]
    prompt = chat.render(first)
    # Sampled ids that are NOT the canonical tokenisation of their text: one id per character.
    sampled = [chat.tokenizer.convert_tokens_to_ids(ch) for ch in "hello"] + [
        chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    ]
    assert chat.decode(sampled) == "hello" and chat.encode("hello") != sampled[:-1]
    reply = {"role": "assistant", "content": "hello", "tool_calls": []}
    prior = [
        PriorCall(7, tools_key(None), tuple(canonical_message(m) for m in [*first, reply]), prompt, sampled)
    ]
    second = [*first, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}]
    rendered = render_prompt(chat, second, None, prior)
    assert rendered.base_call_id == 7
    expected = prompt + sampled + chat.append(sampled, [{"role": "user", "content": "again"}])
    assert rendered.prompt_ids == expected
    # Text-wise it is the same conversation a plain re-render gives; only the ids of the reply differ.
    assert chat.decode(rendered.prompt_ids) == chat.decode(chat.render(second))


def test_longest_matching_call_is_used_and_tools_must_match(chat: ChatFormat) -> None:
    user = {"role": "user", "content": "q"}
    a1 = {"role": "assistant", "content": "a1"}
    u2 = {"role": "user", "content": "q2"}
    a2 = {"role": "assistant", "content": "a2"}
    ids = chat.encode("a1<|im_end|>")
    canon = [canonical_message(m) for m in (user, a1, u2, a2)]
    short = PriorCall(1, tools_key(TOOLS), tuple(canon[:2]), [1, 2], ids)
    long = PriorCall(2, tools_key(TOOLS), tuple(canon[:4]), [1, 2, 3], ids)
    msgs = [user, a1, u2, a2, {"role": "user", "content": "q3"}]
    assert render_prompt(chat, msgs, TOOLS, [short, long]).base_call_id == 2
    assert render_prompt(chat, msgs, None, [short, long]).base_call_id is None  # tools differ
    # A request ending with an assistant message (a prefill) is rendered from scratch.
    assert render_prompt(chat, [user, a1], TOOLS, [short]).base_call_id is None


def test_tool_results_are_appended_in_token_space(chat: ChatFormat) -> None:
    first = [{"role": "user", "content": "list files"}]
    prompt = chat.render(first, TOOLS)
    sampled = chat.encode('<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>')
    call = {"id": "call_x_0", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
    reply = {"role": "assistant", "content": "", "tool_calls": [call]}
    prior = [
        PriorCall(3, tools_key(TOOLS), tuple(canonical_message(m) for m in [*first, reply]), prompt, sampled)
    ]
    result = {"role": "tool", "tool_call_id": "call_x_0", "content": "a.py"}
    rendered = render_prompt(chat, [*first, {**reply, "content": None}, result], TOOLS, prior)
    assert rendered.base_call_id == 3
    assert rendered.prompt_ids == prompt + sampled + chat.append(sampled, [result], TOOLS)
