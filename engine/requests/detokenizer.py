"""`IncrementalDetokenizer`: one request's output text, decoded a token at a time, with its stop
strings looked for in the new text only.

Decoding a request's whole output after every token, and searching every stop string over all of
it, costs time in proportion to the output so far, in the loop that steps every request: one
client with a long output and many stop strings then slows every other stream. Here a token costs
the decode of its own bytes and a search of at most `longest stop string - 1 + new text`
characters: a stop string that ends in the new text starts no earlier than that.

The output is decoded as one UTF-8 byte stream: each token's bytes (`Tokenizer.token_bytes`) go
through Python's incremental UTF-8 decoder, which holds back at most the 3 bytes of a character
still being written and turns bytes that can form no character into one replacement character per
maximal invalid run, as the Unicode standard asks (and as the byte-level decoder's whole decode
does). Where the output is valid UTF-8 the text is the whole decode's. Where it is not, a
SentencePiece whole decode turns every byte of a fallback run into a replacement character, valid
ones too; that cannot be streamed (a run has no bounded end), so the stream keeps the valid ones.
(vLLM instead decodes the tokens since the last text with and without the new one; after an invalid
byte that drops a valid character whose bytes straddle its four-token give-up.)

Text is handed out (`take_new_text`) as soon as it can no longer turn out to be the start of a
stop string; the stop string itself never is (as vLLM, the output ends before it). The number and
length of stop strings are capped in `SamplingParams`, so each token's search stays bounded."""

from __future__ import annotations

import codecs

from engine.loading.tokenizer import Tokenizer


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, stop: list[str]):
        self._token_bytes = tokenizer.token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
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
        return self._append(self._utf8.decode(self._token_bytes(token_id)))

    def _append(self, piece: str) -> str | None:
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

    def take_new_text(self, finished: bool) -> str:
        """The text no earlier call returned that can be shown now: all of it up to the stop
        string once finished; before that, all but what may still begin a stop string. Bytes of
        a character the output ended inside are shown, once finished, as a replacement character."""
        if finished and self.stop_end is None:
            self._append(self._utf8.decode(b"", final=True))
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
