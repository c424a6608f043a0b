"""`IncrementalDetokenizer`: one request's output text, decoded a token at a time, with its stop
strings looked for in the new text only.

Decoding a request's whole output after every token, and searching every stop string over all of
it, costs time in proportion to the output so far, in the loop that steps every request: one
client with a long output and many stop strings then slows every other stream. Here a token costs
the decode of a few tokens and a search of at most `longest stop string - 1 + new text`
characters: a stop string that ends in the new text starts no earlier than that.

The decode is vLLM's incremental one: the tokens since the last text handed out are decoded with
and without the new one, and the difference is the new text, unless it ends inside a UTF-8
character (a replacement character), when it waits for the next token. (`tokenizers`'
DecodeStream does the same, but raises on a run of byte tokens that is not valid UTF-8, which a
model may sample: a step must not fail for what a model writes.)

Text is handed out (`take_new_text`) as soon as it can no longer turn out to be the start of a
stop string; the stop string itself never is (as vLLM, the output ends before it). The number and
length of stop strings are capped in `SamplingParams`, so each token's search stays bounded."""

from __future__ import annotations

from engine.loading.tokenizer import Tokenizer

UTF8_MAX_BYTES = 4


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, stop: list[str]):
        self._tokenizer = tokenizer
        self._token_ids: list[int] = []
        # Tokens before `_read_offset` have been turned into text; those from `_prefix_offset` on
        # are decoded again for context (a byte-level token's text depends on its neighbours).
        self._prefix_offset = self._read_offset = 0
        self._stop = stop
        # Characters that may still be the start of a stop string, so are not handed out yet.
        self._held_back = max((len(text) for text in stop), default=1) - 1
        self._pieces: list[str] = []
        self._length = 0
        # Decoded, not handed out yet: the last `_held_back` characters and what came after them.
        self._unsent = ""
        self.stop_end: int | None = None  # where the output text ends: before the stop string hit
        self.matched_stop: str | None = None

    def add(self, token_id: int) -> str | None:
        """Decode one more token; the stop string it completes, if any (the earliest in the text)."""
        piece = self._decode_new_token(token_id)
        if not piece:
            return None
        window_start = max(0, len(self._unsent) - self._held_back)
        window = self._unsent[window_start:] + piece
        offset = self._length - (len(self._unsent) - window_start)
        self._pieces.append(piece)
        self._length += len(piece)
        self._unsent += piece
        hits = [(position, text) for text in self._stop if (position := window.find(text)) >= 0]
        if hits:
            position, self.matched_stop = min(hits)
            self.stop_end = offset + position
            return self.matched_stop
        return None

    def _decode_new_token(self, token_id: int) -> str:
        self._token_ids.append(token_id)
        decode = self._tokenizer.decode
        before = decode(self._token_ids[self._prefix_offset : self._read_offset])
        after = decode(self._token_ids[self._prefix_offset :])
        if len(after) <= len(before):
            return ""  # a special token
        # A character still missing bytes waits, but no longer than the 4 bytes UTF-8 allows: bytes
        # that form no character are shown as replacement characters, as the whole decode does.
        if after.endswith("\ufffd") and len(self._token_ids) - self._read_offset < UTF8_MAX_BYTES:
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self._token_ids)
        return after[len(before) :]

    def take_new_text(self, finished: bool) -> str:
        """The text no earlier call returned that can be shown now: all of it up to the stop
        string once finished; before that, all but what may still begin a stop string."""
        if finished:
            end = self._length if self.stop_end is None else self.stop_end
        else:
            end = self._length - self._held_back
        ready = end - (self._length - len(self._unsent))  # characters past those handed out
        if ready <= 0:
            return ""
        new_text, self._unsent = self._unsent[:ready], self._unsent[ready:]
        return new_text

    @property
    def text(self) -> str:
        """The whole output text, ending before the stop string hit."""
        return "".join(self._pieces)[: self.stop_end]
