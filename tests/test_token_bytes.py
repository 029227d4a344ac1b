"""Each token's own bytes, for OpenAI logprobs' ``bytes``: on the default model's byte-level BPE, and on
a SentencePiece-style vocabulary with byte fallback (built here, as Llama 2 and Mistral write theirs)."""

from __future__ import annotations

from typing import Any

from coderl.chat.token_bytes import decoder_kinds, token_bytes

TEXT = "naïve 😀 日本, done"


def test_byte_level_tokens_join_to_the_texts_utf8(tokenizer: Any) -> None:
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    pieces = token_bytes(tokenizer, ids)
    assert "ByteLevel" in decoder_kinds(tokenizer)
    assert any("\ufffd" in tokenizer.decode([i]) for i in ids)  # some token holds part of a character
    assert b"".join(pieces) == TEXT.encode()
    assert len(pieces) == len(ids) and all(pieces)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert token_bytes(tokenizer, [end]) == [b"<|im_end|>"]  # a special token: its text


def test_an_added_tokens_bytes_are_its_texts() -> None:
    """An added token's piece is its text, not byte-level characters ("é" is one of those: read as one,
    it gave the byte 0xE9, not UTF-8; decoding the token through the byte-level decoder does the same)."""
    from coderl.checkpoint import load_tokenizer, resolve_checkpoint

    tok = load_tokenizer(resolve_checkpoint())  # a copy of its own: the session's stays unchanged
    tok.add_tokens(["café"])
    ids = tok.encode("un café", add_special_tokens=False)
    assert tok.convert_tokens_to_ids("café") in ids
    assert b"".join(token_bytes(tok, ids)) == "un café".encode()


def test_byte_fallback_pieces_are_their_byte() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set("▁naïvedone,"))
    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=backend)
    ids = tok.encode(TEXT, add_special_tokens=False)
    assert {"ByteFallback", "Replace"} <= decoder_kinds(tok)
    assert any(p.startswith("<0x") for p in tok.convert_ids_to_tokens(ids))  # 😀 and 日本 fall back to bytes
    assert b"".join(token_bytes(tok, ids)) == b" " + TEXT.encode()  # the first ▁ is a space, as SentencePiece has it
