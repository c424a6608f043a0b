"""The output text a token at a time (engine/requests/detokenizer.py), on the two bundled tokenizers: each
token stands for the bytes its own decode gives, the pieces add up to the whole byte stream's
decode (the whole decode's, where that is valid UTF-8), a stop string is found at the same token
and place as a search of the whole text after every token would find it, no piece handed out holds
any of the stop string, and a step never decodes a whole output again."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import SamplingParams
from engine.errors import ConfigError
from engine.loading.model_source import read_tokenizer
from engine.loading.tokenizer import Tokenizer
from engine.requests.detokenizer import IncrementalDetokenizer
from engine.requests.sampling_params import MAX_STOP_STRING_CHARS, MAX_STOP_STRINGS

TOKENIZERS = {model: read_tokenizer(model) for model in ("smollm2-135m", "gemma3-270m")}
SAMPLE_TEXTS = (
    "Hello, wörld! 日本語のテキスト 🎉🎉 naïve café\n\n  indented\tcode() -> None",
    "Les élèves ont fini. Ωμέγα — “quotes” and 1234567890 digits, then END and STOP.",
)


# Tokens that hold part of a character (their own decode shows a replacement character) or one
# byte: drawn often, they make runs of bytes that are valid, invalid, and split across tokens.
BYTE_TOKENS = {
    model: [
        token
        for token in range(tokenizer.vocab_size)
        if "\ufffd" in tokenizer.decode([token]) or len(tokenizer.token_bytes(token)) == 1
    ]
    for model, tokenizer in TOKENIZERS.items()
}


@st.composite
def outputs(draw):
    """(tokenizer, token ids): an encoded text, random ids (bytes, special tokens), or both."""
    model = draw(st.sampled_from(sorted(TOKENIZERS)))
    tokenizer = TOKENIZERS[model]
    text_ids = tokenizer.encode(draw(st.sampled_from(SAMPLE_TEXTS)), add_special_tokens=False)
    any_token = st.integers(0, tokenizer.vocab_size - 1)
    random_ids = draw(st.lists(st.one_of(any_token, st.sampled_from(BYTE_TOKENS[model])), max_size=30))
    ids = draw(st.sampled_from([text_ids, random_ids, random_ids + text_ids, text_ids + random_ids]))
    return tokenizer, ids or text_ids


def stream_decoded_from_scratch(tokenizer: Tokenizer, ids: list[int]) -> str:
    """The reference: the output's bytes so far, decoded in one go, as far as they form whole
    characters (bytes that can form none are replacement characters)."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(
        b"".join(tokenizer.token_bytes(token) for token in ids)
    )


def stop_of_whole_text_search(tokenizer: Tokenizer, ids: list[int], stops: list[str]):
    """The reference: after every token, decode the whole output so far and search every stop
    string in it (the engine's old way). (token index, text end, stop) of the first hit, or None."""
    read_length = 0
    for index in range(len(ids)):
        text = stream_decoded_from_scratch(tokenizer, ids[: index + 1])
        if len(text) <= read_length:
            continue
        read_length = len(text)
        hits = [(text.find(stop), stop) for stop in stops if stop in text]
        if hits:
            position, stop = min(hits)
            return index, position, stop
    return None


@pytest.mark.parametrize("model", sorted(TOKENIZERS))
def test_each_token_stands_for_the_bytes_its_own_decode_gives(model):
    """Over the whole vocabulary: a token's bytes decode to what the tokenizer decodes it to; a
    token holding part of a character decodes, alone, to replacement characters both ways."""
    tokenizer = TOKENIZERS[model]
    wrong = [
        token
        for token in range(tokenizer.vocab_size)
        if tokenizer.token_bytes(token).decode("utf-8", "replace") != tokenizer.decode([token])
    ]
    assert wrong == []


def run(tokenizer: Tokenizer, ids: list[int], stops: list[str]):
    """(token index of the stop or None, the pieces handed out, the detokenizer), as the engine
    drives it: a piece after every token, the rest when it ends."""
    detokenizer = IncrementalDetokenizer(tokenizer, stops)
    pieces, stopped_at = [], None
    for index, token in enumerate(ids):
        if detokenizer.add(token) is not None:
            stopped_at = index
            break
        pieces.append(detokenizer.take_new_text(finished=False))
    pieces.append(detokenizer.take_new_text(finished=True))
    return stopped_at, pieces, detokenizer


@given(outputs())
@settings(deadline=None)
def test_the_pieces_add_up_to_the_whole_byte_stream_decoded(output):
    tokenizer, ids = output
    _, pieces, detokenizer = run(tokenizer, ids, [])
    whole_bytes = b"".join(tokenizer.token_bytes(token) for token in ids)
    assert "".join(pieces) == detokenizer.text == whole_bytes.decode("utf-8", "replace")
    whole = tokenizer.decode(ids)
    if "\ufffd" not in whole or tokenizer is TOKENIZERS["smollm2-135m"]:
        # Valid UTF-8, or byte-level BPE, whose whole decode replaces invalid bytes as the stream
        # does. (SentencePiece's turns every byte of a fallback run that is not valid UTF-8 into
        # a replacement character, the valid ones too.)
        assert detokenizer.text == whole


@pytest.mark.parametrize("model", sorted(TOKENIZERS))
def test_a_character_after_an_invalid_byte_is_kept_whatever_the_tokens_split(model):
    """A stray continuation byte then 🎉's four bytes, one token each: the old decode (vLLM's, the
    tokens since the last text with and without the new one) gave up after four tokens and showed
    two replacement characters; the bytes say one, then the emoji."""
    tokenizer = TOKENIZERS[model]
    single_byte = {tokenizer.token_bytes(token): token for token in BYTE_TOKENS[model]}
    ids = [single_byte[bytes([byte])] for byte in b"\x80" + "🎉".encode()]
    assert "".join(run(tokenizer, ids, [])[1]) == "\ufffd🎉"


@given(outputs(), st.data())
@settings(deadline=None)
def test_a_stop_string_is_found_at_the_token_and_place_a_whole_text_search_finds_it(output, data):
    tokenizer, ids = output
    whole = stream_decoded_from_scratch(tokenizer, ids).replace("\ufffd", "")
    # Stop strings cut from the text itself (so most are hit, across token boundaries), plus some
    # that are nowhere in it.
    cuts = st.tuples(st.integers(0, max(0, len(whole) - 1)), st.integers(1, 12))
    stops = [whole[start : start + length] for start, length in data.draw(st.lists(cuts, min_size=1, max_size=4))]
    stops = [stop for stop in stops if stop] + data.draw(
        st.lists(st.sampled_from(["§§", "ZZZ", "\n\n\n\n"]), max_size=2)
    )
    stopped_at, pieces, detokenizer = run(tokenizer, ids, stops)
    expected = stop_of_whole_text_search(tokenizer, ids, stops)
    if expected is None:
        assert stopped_at is None and detokenizer.matched_stop is None
        return
    index, position, stop = expected
    assert (stopped_at, detokenizer.stop_end, detokenizer.matched_stop) == (index, position, stop)
    streamed = "".join(pieces)
    assert streamed == detokenizer.text == stream_decoded_from_scratch(tokenizer, ids[: index + 1])[:position]
    # No piece handed out before the end holds any part of the stop string.
    assert not any(stop in piece for piece in pieces)


def test_stop_strings_are_capped_in_number_and_length():
    SamplingParams(stop=["x" * MAX_STOP_STRING_CHARS] * MAX_STOP_STRINGS)
    with pytest.raises(ConfigError, match=f"stop: at most {MAX_STOP_STRINGS} stop strings, got {MAX_STOP_STRINGS + 1}"):
        SamplingParams(stop=["x"] * (MAX_STOP_STRINGS + 1))
    with pytest.raises(ConfigError, match=f"at most {MAX_STOP_STRING_CHARS} characters, got one of 257"):
        SamplingParams(stop=["ok", "y" * (MAX_STOP_STRING_CHARS + 1)])


def test_no_step_decodes_the_whole_output_however_many_stop_strings(make_smollm_engine, monkeypatch):
    """Each token's cost must not grow with the output: the old engine decoded the whole output
    after every token of a request with stop strings (0.5-1.6 s a token at 8k tokens with 10,000
    of them, in the loop that steps everyone)."""
    engine = make_smollm_engine()
    decoded = []
    whole_decode = Tokenizer.decode
    monkeypatch.setattr(
        Tokenizer, "decode", lambda self, ids, **kw: decoded.append(len(ids)) or whole_decode(self, ids, **kw)
    )
    stops = [f"never-{index}" for index in range(MAX_STOP_STRINGS)]
    (output,) = engine.generate(
        ["Once upon a time"], SamplingParams(max_tokens=60, temperature=0.0, ignore_eos=True, stop=stops)
    )
    assert output.finish_reason == "length" and len(output.token_ids) == 60
    # Each token's bytes are looked up: no step decodes any run of tokens, let alone the output.
    assert decoded == [] and output.text == whole_decode(engine.tokenizer, output.token_ids)


@pytest.mark.parametrize("model", sorted(TOKENIZERS))
def test_the_stream_holds_back_exactly_the_longest_stop_string_less_one(model):
    """Issue 58's planted bug: the hold-back without its `- 1` kept one character more than can
    begin a stop string (every stream lagged a character behind). A stop string of 4 characters
    that never comes: after each token, all but the last 3 characters decoded have been sent."""
    tokenizer = TOKENIZERS[model]
    detokenizer = IncrementalDetokenizer(tokenizer, ["§§§§", "§"])
    sent = 0
    for token in tokenizer.encode(SAMPLE_TEXTS[0] + SAMPLE_TEXTS[1], add_special_tokens=False):
        assert detokenizer.add(token) is None
        sent += len(detokenizer.take_new_text(finished=False))
        assert sent == max(0, len(detokenizer.text) - 3)
    assert sent + len(detokenizer.take_new_text(finished=True)) == len(detokenizer.text)
