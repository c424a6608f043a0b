"""Prompt token ids for synthetic traffic, made of real text so that outputs stay readable.

Synthetic prompts of N tokens are cut at a seeded offset from a stream of tokenised ShareGPT
replies. Models without a tokenizer (test checkpoints) get seeded random token ids instead.
"""

from __future__ import annotations

import functools

import numpy as np

from engine.errors import ConfigError
from engine.loading.sharegpt import load_sharegpt
from engine.loading.tokenizer import Tokenizer
from workbench.backends.protocol import Chat

_CORPUS_CONVERSATIONS = 400  # about 150k tokens of English text, tokenised once
# The copying source's instruction, before a ShareGPT reply.
COPY_INSTRUCTION = "Repeat the following text exactly, word for word:\n\n"


class PromptMaker:
    def __init__(self, tokenizer: Tokenizer | None, vocab_size: int):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size

    def synthetic(self, num_tokens: int, rng: np.random.Generator) -> list[int]:
        if self.tokenizer is None:
            return rng.integers(0, self.vocab_size, num_tokens).tolist()
        stream = text_stream(self.tokenizer)
        start = int(rng.integers(0, len(stream)))
        # Wrap around the end of the stream; prompts longer than the stream repeat it.
        indices = (start + np.arange(num_tokens)) % len(stream)
        return stream[indices].tolist()

    def sharegpt(self, rng: np.random.Generator) -> tuple[list[int], int, Chat | None]:
        """A random conversation's first question (chat-formatted when the model has a template),
        the token length of the reference reply, and the chat the prompt was templated from (None
        without a template: the prompt is the question's text)."""
        self._tokenizer_for("sharegpt")
        conversations = load_sharegpt().conversations
        conversation = conversations[int(rng.integers(0, len(conversations)))]
        text, messages = conversation.prompt, None
        if self.tokenizer.chat_template:
            messages = ({"role": "user", "content": text},)
            text = self.tokenizer.apply_chat_template(list(messages))
        reply_tokens = len(self.tokenizer.encode(conversation.reply, add_special_tokens=False))
        return self.tokenizer.encode(text), reply_tokens, messages

    def copying(self, rng: np.random.Generator, room: int) -> tuple[list[int], Chat | None]:
        """A random ShareGPT reply handed back with COPY_INSTRUCTION (chat-formatted when the model
        has a template), its prompt at most `room` tokens (the reply cut at a line's end where it
        must be), and the chat it was templated from."""
        tokenizer = self._tokenizer_for("copying")
        conversations = load_sharegpt().conversations
        reply = conversations[int(rng.integers(0, len(conversations)))].reply
        while True:
            text, messages = COPY_INSTRUCTION + reply, None
            if tokenizer.chat_template:
                messages = ({"role": "user", "content": text},)
                text = tokenizer.apply_chat_template(list(messages))
            prompt = tokenizer.encode(text)
            if len(prompt) <= room or "\n" not in reply.strip():
                return prompt[:room], messages if len(prompt) <= room else None
            reply = reply.strip().rsplit("\n", 1)[0]

    def _tokenizer_for(self, source: str) -> Tokenizer:
        if self.tokenizer is None:
            raise ConfigError(
                f"prompts: {source} prompts are ShareGPT text and need a model with a tokenizer (a simulated model "
                "has none); use synthetic prompts"
            )
        return self.tokenizer


@functools.lru_cache(maxsize=4)
def text_stream(tokenizer: Tokenizer) -> np.ndarray:
    """The tokenised text synthetic prompts are cut from (0.7 s on 2 cores, holding the GIL: the
    window reads it while loading, not at the first injected request)."""
    replies = [conversation.reply for conversation in load_sharegpt().conversations[:_CORPUS_CONVERSATIONS]]
    return np.asarray(tokenizer.encode("\n\n".join(replies), add_special_tokens=False), dtype=np.int64)
