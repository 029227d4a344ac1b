"""Messages to token ids through the model's own chat template, and appending in token space.

A conversation's ids are built once and only ever *extended*: the assistant's tokens are the ids the
engine sampled, and each later message is rendered on its own and appended (see :meth:`ChatFormat.append`).
Nothing already in the conversation is decoded and re-encoded, because that does not round-trip
(merged characters, the newline after an end-of-turn token, tool-call spacing): the trainer would then
score tokens the model never sampled.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from coderl.chat.parse import ParsedCompletion, ToolFormat, parse_completion
from coderl.chat.tools import Message, arguments_dict, to_hermes_messages
from coderl.errors import ChatError

if TYPE_CHECKING:
    from coderl.engine.config import ModelConfig

# Stand-in conversation that new messages are rendered after, so the template emits exactly the text
# that follows a closed assistant turn. The marker is unlikely to occur in any template's own text.
_MARK = "\u2063coderl-assistant-marker\u2063"
_ENCODE_CACHE = 4096
_BASE: list[Message] = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": _MARK},
]


class ChatFormat:
    """A tokenizer's chat template plus a tool-call convention.

    Templates that take ``tools`` natively (Qwen, Llama 3.1+, Hermes) get the schemas and tool calls
    as they expect; others (SmolLM2) get the Hermes text convention from :mod:`coderl.chat.tools`.
    """

    def __init__(self, tokenizer: Any, tool_format: ToolFormat = "auto") -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatError("the tokenizer has no chat_template; use a chat/instruct checkpoint or set one")
        self.tokenizer = tokenizer
        self.tool_format: ToolFormat = tool_format
        self.native_tools = "tools" in str(tokenizer.chat_template)
        self.developer_role = "developer" in str(tokenizer.chat_template)
        """Whether the template knows OpenAI's ``developer`` role; where it does not, a developer message
        renders as a system message (the role's meaning): Qwen's templates drop a role they do not know,
        silently, and SmolLM2's writes one it was never trained on (the Codex CLI sends its
        instructions as developer messages)."""
        self._base_text: dict[str, str] = {}
        self._encoded: OrderedDict[str, list[int]] = OrderedDict()
        self._trailer = self._assistant_trailer()

    @classmethod
    def for_model(cls, model: ModelConfig | None = None, tool_format: ToolFormat | None = None) -> ChatFormat:
        """The chat format of the configured model's tokenizer (``model.path``; the default model
        when empty), loaded from its local checkpoint folder, with ``model.tool_format`` (unless
        ``tool_format`` is given)."""
        from coderl.checkpoint import load_tokenizer, resolve_checkpoint

        folder = resolve_checkpoint(model.path, model.cache_dir) if model is not None else resolve_checkpoint()
        fmt = tool_format or (model.tool_format if model is not None else "auto")
        return cls(load_tokenizer(folder), fmt)

    # ------------------------------------------------------------------ rendering
    def render_text(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The template's text for ``messages`` (what a plain re-render would tokenize)."""
        if not self.developer_role:
            messages = [{**m, "role": "system"} if m.get("role") == "developer" else m for m in messages]
        if self.native_tools:
            msgs = [_normalise_native(m) for m in messages]
            kwargs: dict[str, Any] = {"tools": tools} if tools else {}
        else:
            msgs, kwargs = to_hermes_messages(messages, tools, xml=self.tool_format == "xml"), {}
        try:
            text = self.tokenizer.apply_chat_template(
                msgs, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
            )
        except Exception as exc:  # jinja raises TemplateError and friends
            raise ChatError(f"the chat template could not render these messages: {exc}") from exc
        return str(text)

    def encode(self, text: str) -> list[int]:
        """Ids of template text; special tokens written in it (``<|im_start|>``) map to their ids.

        Cached (LRU): the G samples of a task share their prompt, and tool results repeat.
        """
        ids = self._encoded.get(text)
        if ids is None:
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            self._encoded[text] = ids
            if len(self._encoded) > _ENCODE_CACHE:
                self._encoded.popitem(last=False)
        else:
            self._encoded.move_to_end(text)
        return list(ids)

    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Prompt ids of a whole conversation (use once, for its start)."""
        if not messages:
            raise ChatError("cannot render an empty conversation; give at least one message")
        return self.encode(self.render_text(messages, tools, add_generation_prompt))

    @property
    def end_of_turn(self) -> int | None:
        """The id the model samples to end its turn (``<|im_end|>`` in ChatML); None when the template
        closes a turn with nothing the model writes."""
        return self._trailer[0] if self._trailer else None

    # ------------------------------------------------------------------ token-space appends
    def turn_suffix(self, completion_ids: list[int]) -> list[int]:
        """Ids that close the assistant turn after what the model sampled.

        The template's end of an assistant turn (``<|im_end|>\\n`` in ChatML) starts with the stop token
        that the model itself sampled; only the rest (``\\n``) is added. A completion cut off by
        ``max_tokens`` gets the whole closing text.
        """
        trailer = self._trailer
        if completion_ids and trailer and completion_ids[-1] == trailer[0]:
            return trailer[1:]
        return list(trailer)

    def render_delta(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Ids of ``messages`` as they follow a closed assistant turn, ending with the generation prompt."""
        # Tools only shape the system turn of templates without native tool support: leave them out.
        tools = tools if self.native_tools else None
        key = json.dumps(tools, sort_keys=True) if tools else ""
        base = self._base_text.get(key)
        if base is None:
            base = self._base_text[key] = self.render_text(_BASE, tools, add_generation_prompt=False)
        full = self.render_text(_BASE + list(messages), tools, add_generation_prompt=add_generation_prompt)
        if not full.startswith(base):
            raise ChatError(
                "the chat template renders earlier turns differently once new messages follow, so messages "
                "cannot be appended in token space with it"
            )
        return self.encode(full[len(base) :])

    def append(
        self,
        completion_ids: list[int],
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """Environment ids to append after an assistant completion: the turn's closing tokens, then the
        new messages (tool results, user turns) and the next generation prompt. All get mask 0."""
        return self.turn_suffix(completion_ids) + self.render_delta(messages, tools, add_generation_prompt)

    # ------------------------------------------------------------------ decoding
    def decode(self, ids: list[int]) -> str:
        """Readable text of ids, special tokens dropped."""
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def parse(self, completion_ids: list[int], id_prefix: str = "call") -> ParsedCompletion:
        """A completion's content and tool calls (malformed calls land in ``errors``)."""
        return parse_completion(self.decode(completion_ids), self.tool_format, id_prefix=id_prefix)

    def generation_prompt(self) -> list[int]:
        """The ids the template appends to open the assistant's turn (``<|im_start|>assistant\n``);
        empty when the template writes none."""
        bare = self.render_text(_BASE, add_generation_prompt=False)
        opened = self.render_text(_BASE, add_generation_prompt=True)
        return self.encode(opened[len(bare) :]) if opened.startswith(bare) and opened != bare else []

    def _assistant_trailer(self) -> list[int]:
        text = self.render_text(_BASE, add_generation_prompt=False)
        at = text.rfind(_MARK)
        if at < 0:
            raise ChatError("the chat template drops assistant content; it cannot be used for agent turns")
        return self.encode(text[at + len(_MARK) :])


def _normalise_native(msg: Message) -> Message:
    """Native templates want tool-call arguments as objects, not OpenAI's JSON strings."""
    if msg.get("role") == "assistant" and msg.get("tool_calls"):
        calls = []
        for call in msg["tool_calls"]:
            fn = call.get("function", call)
            calls.append(
                {
                    **call,
                    "function": {
                        "name": fn.get("name"),
                        "arguments": arguments_dict(fn.get("arguments", {})),
                    },
                }
            )
        msg = {**msg, "tool_calls": calls, "content": msg.get("content") or ""}
    return msg
