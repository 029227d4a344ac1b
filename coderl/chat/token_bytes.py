"""The bytes each token stands for, as OpenAI's logprobs report them (``bytes``: joined, a reply's
tokens give its UTF-8 text, also where one character is split over several tokens).

Decoding a token alone cannot give them: a token holding part of a character decodes to U+FFFD.
Byte-level BPE vocabularies (GPT-2, Llama 3, Qwen, SmolLM) write each byte as one printable
character, so a token's piece maps back to its bytes; SentencePiece vocabularies with byte fallback
write a lone byte as ``<0xNN>`` and a space as ``▁`` (so there the first piece's space is in its
bytes, where decoding drops it). Added and special tokens are their text's UTF-8, the pieces of other
vocabularies their decoded text's.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@cache
def _byte_of_char() -> dict[str, int]:
    """Byte-level BPE's alphabet, reversed: printable Latin-1 bytes stand for themselves, the other
    bytes (controls, space, 0x7F-0xA0, 0xAD) for the code points from 256 up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def decoder_kinds(tokenizer: Any) -> frozenset[str]:
    """The types of the fast tokenizer's decoder (a ``Sequence``'s members too); empty when unknown."""
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if decoder is None:
        return frozenset()
    try:
        state = json.loads(decoder.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return frozenset({type(decoder).__name__})
    kinds: set[str] = set()
    stack = [state]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("type"), str):
                kinds.add(node["type"])
            stack.extend(node.get("decoders") or [])
    return frozenset(kinds)


def token_bytes(tokenizer: Any, ids: list[int]) -> list[bytes]:
    """Each token's bytes (module doc)."""
    kinds = decoder_kinds(tokenizer)
    byte_level = "ByteLevel" in kinds
    table = _byte_of_char()
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}  # id -> AddedToken: its content is its text
    out: list[bytes] = []
    for token_id, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids), strict=True):
        if not isinstance(piece, str):  # an id outside the vocabulary
            out.append(b"")
        elif token_id in added:  # (decoding one through a byte-level decoder misreads its non-ASCII text)
            out.append(str(added[token_id].content).encode())
        elif byte_level and all(c in table for c in piece):
            out.append(bytes(table[c] for c in piece))
        elif (m := _BYTE_PIECE.fullmatch(piece)) is not None:
            out.append(bytes([int(m.group(1), 16)]))
        elif "Metaspace" in kinds or "ByteFallback" in kinds:
            out.append(piece.replace("\u2581", " ").encode())
        else:
            out.append(str(tokenizer.decode([token_id], skip_special_tokens=False)).encode())
    return out
