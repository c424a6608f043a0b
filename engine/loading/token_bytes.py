"""`TokenBytes`: the bytes a token stands for, so that output text can be decoded as one UTF-8
byte stream, a token at a time (engine/requests/detokenizer.py).

A token's text alone is not enough: byte-level BPE (SmolLM2, Llama 3) and SentencePiece with byte
fallback (Gemma, Llama 2) both have tokens that hold part of a character ("ð", "<0xF0>"), whose
text decoded alone is a replacement character. Their bytes, joined, decode to the text the whole
decode gives wherever that is valid UTF-8.

- Byte-level BPE spells each byte as one printable character (GPT-2's table): the bytes are the
  piece's characters mapped back.
- SentencePiece spells a space as "▁" and a fallback byte as "<0xNN>".
- Any other decoder: the token's own decode, encoded (exact for vocabularies of whole words).

Special tokens stand for no bytes: the output text skips them, as the whole decode does."""

from __future__ import annotations

import json
import re
from functools import cache

from tokenizers import Tokenizer as BackendTokenizer

_FALLBACK_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SENTENCEPIECE_SPACE = "▁"


@cache
def gpt2_byte_of_character() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the 188 printable Latin-1 bytes stand for themselves,
    the other 68 are shifted past 255 in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    characters = {chr(byte): byte for byte in printable}
    characters.update({chr(256 + index): byte for index, byte in enumerate(others)})
    return characters


def _decoder_types(backend: BackendTokenizer) -> set[str]:
    decoder = backend.decoder
    if decoder is None:
        return set()
    description = json.loads(decoder.__getstate__())
    return {description.get("type"), *(step.get("type") for step in description.get("decoders", []))}


class TokenBytes:
    """token id -> bytes, for one tokenizer; each token is worked out once, when first asked for."""

    def __init__(self, backend: BackendTokenizer):
        self._backend = backend
        decoder_types = _decoder_types(backend)
        self._byte_level = "ByteLevel" in decoder_types
        self._byte_fallback = "ByteFallback" in decoder_types
        self._known: dict[int, bytes] = {}

    def __call__(self, token_id: int) -> bytes:
        known = self._known.get(token_id)
        if known is None:
            known = self._known[token_id] = self._work_out(token_id)
        return known

    def _work_out(self, token_id: int) -> bytes:
        text = self._backend.decode([token_id], skip_special_tokens=True)
        piece = self._backend.id_to_token(token_id)
        if not text or piece is None:
            return b""  # a special token, or an id past the vocabulary
        if self._byte_level:
            byte_of = gpt2_byte_of_character()
            if all(character in byte_of for character in piece):
                return bytes(byte_of[character] for character in piece)
        if self._byte_fallback:
            if fallback := _FALLBACK_BYTE.fullmatch(piece):
                return bytes([int(fallback.group(1), 16)])
            return piece.replace(_SENTENCEPIECE_SPACE, " ").encode()
        return text.encode()
