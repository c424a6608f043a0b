"""The output text a token at a time (engine/detokenizer.py), on the two bundled tokenizers: the
pieces add up to the whole decode, a stop string is found at the same token and place as a search
of the whole text after every token would find it, no piece handed out holds any of the stop
string, and a step never decodes a whole output again."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import SamplingParams
from engine.detokenizer import UTF8_MAX_BYTES, IncrementalDetokenizer
from engine.errors import ConfigError
from engine.loading.model_source import read_tokenizer
from engine.loading.tokenizer import Tokenizer
from engine.sampling_params import MAX_STOP_STRING_CHARS, MAX_STOP_STRINGS

TOKENIZERS = {model: read_tokenizer(model) for model in ("smollm2-135m", "gemma3-270m")}
SAMPLE_TEXTS = (
    "Hello, wörld! 日本語のテキスト 🎉🎉 naïve café\n\n  indented\tcode() -> None",
    "Les élèves ont fini. Ωμέγα — “quotes” and 1234567890 digits, then END and STOP.",
)


@st.composite
def outputs(draw):
    """(tokenizer, token ids): an encoded text, random ids (byte pieces, special tokens), or both."""
    tokenizer = TOKENIZERS[draw(st.sampled_from(sorted(TOKENIZERS)))]
    text_ids = tokenizer.encode(draw(st.sampled_from(SAMPLE_TEXTS)), add_special_tokens=False)
    random_ids = draw(st.lists(st.integers(0, tokenizer.vocab_size - 1), max_size=30))
    ids = draw(st.sampled_from([text_ids, random_ids, random_ids + text_ids, text_ids + random_ids]))
    return tokenizer, ids or text_ids


def stop_of_whole_text_search(tokenizer: Tokenizer, ids: list[int], stops: list[str]):
    """The reference: after every token, decode the whole output and search every stop string in
    it (the engine's old way), over the text as far as it ends in a whole character: a token that
    ends inside one (" " and an emoji's first byte) is read with the token that completes it, or
    with the UTF8_MAX_BYTES-th, when the bytes will never form one. (token index, text end, stop)
    of the first hit, or None."""
    last_read, read_length = -1, 0
    for index in range(len(ids)):
        text = tokenizer.decode(ids[: index + 1])
        if len(text) <= read_length or (text.endswith("\ufffd") and index - last_read < UTF8_MAX_BYTES):
            continue
        last_read, read_length = index, len(text)
        hits = [(text.find(stop), stop) for stop in stops if stop in text]
        if hits:
            position, stop = min(hits)
            return index, position, stop
    return None


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
def test_the_pieces_add_up_to_the_whole_decode(output):
    tokenizer, ids = output
    _, pieces, detokenizer = run(tokenizer, ids, [])
    whole = tokenizer.decode(ids)
    assert "".join(pieces) == detokenizer.text
    if "\ufffd" not in whole:
        assert detokenizer.text == whole
    else:
        # Bytes that form no character: the whole decode shows replacement characters (for every
        # byte of their run), the stream holds the bytes back until they form one.
        assert detokenizer.text.startswith(whole[: whole.index("\ufffd")])


@given(outputs(), st.data())
@settings(deadline=None)
def test_a_stop_string_is_found_at_the_token_and_place_a_whole_text_search_finds_it(output, data):
    tokenizer, ids = output
    whole = tokenizer.decode(ids).replace("\ufffd", "")
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
    assert streamed == detokenizer.text == tokenizer.decode(ids[: index + 1])[:position]
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
    # Each token decodes the few tokens since the last whole character, never the output so far.
    assert max(decoded) <= 2 and output.text == whole_decode(engine.tokenizer, output.token_ids)


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
