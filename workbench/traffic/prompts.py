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
        if self.tokenizer is None:
            raise ConfigError(
                "prompts: ShareGPT prompts need a model with a tokenizer (a simulated model has none); "
                "use synthetic prompts"
            )
        conversations = load_sharegpt().conversations
        conversation = conversations[int(rng.integers(0, len(conversations)))]
        text, messages = conversation.prompt, None
        if self.tokenizer.chat_template:
            messages = ({"role": "user", "content": text},)
            text = self.tokenizer.apply_chat_template(list(messages))
        reply_tokens = len(self.tokenizer.encode(conversation.reply, add_special_tokens=False))
        return self.tokenizer.encode(text), reply_tokens, messages


@functools.lru_cache(maxsize=4)
def text_stream(tokenizer: Tokenizer) -> np.ndarray:
    """The tokenised text synthetic prompts are cut from (0.7 s on 2 cores, holding the GIL: the
    window reads it while loading, not at the first injected request)."""
    replies = [conversation.reply for conversation in load_sharegpt().conversations[:_CORPUS_CONVERSATIONS]]
    return np.asarray(tokenizer.encode("\n\n".join(replies), add_special_tokens=False), dtype=np.int64)
