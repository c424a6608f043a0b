"""Text <-> token ids, built with the `tokenizers` library from a GGUF file's vocabulary or from a
Hugging Face `tokenizer.json`, plus the model's chat template (rendered with sandboxed Jinja, the
same way transformers does).

A GGUF holds one of two kinds: byte-level BPE ("gpt2": SmolLM2, Llama 3, Qwen2) with its merges,
or SentencePiece BPE ("llama": Gemma, Llama 2, Mistral) with a scored vocabulary and no merges.
SentencePiece merges the adjacent pair whose joined piece ranks best; the `tokenizers` BPE model
does the same once the merges are listed best first, so they are derived from the vocabulary as
transformers does: every split of every piece into two pieces of the vocabulary, ranked by the
joined piece (by score; for Gemma, whose scores do not follow its merge order, by position)."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import jinja2.sandbox
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as BackendTokenizer

from engine.errors import ModelLoadError
from engine.loading.token_bytes import TokenBytes
from engine.model_spec.architectures import ARCHITECTURES

# llama.cpp's names for byte-level BPE pre-tokenizers. "smollm" (like starcoder) splits every digit
# on its own before the GPT-2 regex, exactly as SmolLM2's own tokenizer.json does.
_DIGIT_SPLITTING_PRE = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_REGEX = _LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")
_REGEX_PRE = {"llama-bpe": _LLAMA3_REGEX, "llama3": _LLAMA3_REGEX, "qwen2": _QWEN2_REGEX}
# GGUF token types (gguf.TokenType): CONTROL and USER_DEFINED tokens are matched whole in text.
_CONTROL, _USER_DEFINED = 3, 4


class Tokenizer:
    def __init__(
        self,
        backend: BackendTokenizer,
        *,
        bos_token_id: int | None,
        eos_token_ids: tuple[int, ...],
        add_bos_token: bool,
        chat_template: str | None,
    ):
        self.backend = backend
        self.bos_token_id = bos_token_id
        self.eos_token_ids = eos_token_ids
        self.add_bos_token = add_bos_token
        self.chat_template = chat_template
        self.token_bytes = TokenBytes(backend)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.backend.encode(text, add_special_tokens=False).ids
        # A text that starts with BOS already (a chat template wrote it) gets no second one.
        if (
            add_special_tokens
            and self.add_bos_token
            and self.bos_token_id is not None
            and ids[:1] != [self.bos_token_id]
        ):
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        return self.backend.id_to_token(token_id) or ""

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise ModelLoadError("this model has no chat template; pass a plain prompt instead of messages")
        environment = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _raise_template_error
        template = environment.from_string(self.chat_template)
        return template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self._token_or_empty(self.bos_token_id),
            eos_token=self._token_or_empty(self.eos_token_ids[0] if self.eos_token_ids else None),
        )

    def _token_or_empty(self, token_id: int | None) -> str:
        return "" if token_id is None else self.token_text(token_id)

    @classmethod
    def from_gguf_metadata(cls, metadata: dict, source: Path) -> Tokenizer:
        """From `tokenizer.ggml.*` keys: llama.cpp's "gpt2" (byte-level BPE) or "llama"
        (SentencePiece BPE) tokenizer model."""
        kind = metadata.get("tokenizer.ggml.model")
        if kind == "gpt2":
            backend = _byte_level_bpe(metadata)
        elif kind == "llama":
            backend = _sentencepiece_bpe(metadata)
        else:
            raise ModelLoadError(
                f"{source}: tokenizer.ggml.model is {kind!r}; supported: 'gpt2' (byte-level BPE) "
                "and 'llama' (SentencePiece BPE)"
            )
        tokens: list[str] = metadata["tokenizer.ggml.tokens"]
        token_types = metadata.get("tokenizer.ggml.token_type", [])
        # Control tokens are special (skipped when decoding without them); user-defined ones
        # (Gemma's "\n", tabs, HTML tags) are plain text that is matched whole. Only tokens of the
        # vocabulary as built: Gemma's runs of spaces were respelled, not added.
        backend.add_tokens(
            [
                AddedToken(tokens[i], special=kind == _CONTROL, normalized=False)
                for i, kind in enumerate(token_types)
                if kind in (_CONTROL, _USER_DEFINED) and backend.token_to_id(tokens[i]) == i
            ]
        )
        eos = metadata.get("tokenizer.ggml.eos_token_id")
        return cls(
            backend,
            bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=() if eos is None else (int(eos),),
            # llama.cpp adds BOS to a SentencePiece vocabulary whose file does not say otherwise.
            add_bos_token=bool(metadata.get("tokenizer.ggml.add_bos_token", kind == "llama")),
            chat_template=metadata.get("tokenizer.chat_template") or _architecture_chat_template(metadata),
        )

    @classmethod
    def from_hf_directory(cls, directory: Path, eos_token_ids: tuple[int, ...]) -> Tokenizer | None:
        """`tokenizer.json` (+ `tokenizer_config.json` for the chat template); None when absent."""
        tokenizer_file = directory / "tokenizer.json"
        if not tokenizer_file.exists():
            return None
        try:
            backend = BackendTokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # the tokenizers library raises its own untyped exceptions
            raise ModelLoadError(f"{tokenizer_file}: not a valid tokenizer.json ({exc})") from exc
        settings = _read_json_if_present(directory / "tokenizer_config.json")
        bos_token = _token_content(settings.get("bos_token"))
        bos_id = backend.token_to_id(bos_token) if bos_token else None
        return cls(
            backend,
            bos_token_id=bos_id,
            eos_token_ids=eos_token_ids,
            add_bos_token=bool(settings.get("add_bos_token", False)),
            chat_template=settings.get("chat_template"),
        )


def _byte_level_bpe(metadata: dict) -> BackendTokenizer:
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    merges = [tuple(merge.split(" ", 1)) for merge in metadata["tokenizer.ggml.merges"]]
    backend = BackendTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    backend.pre_tokenizer = _gguf_pre_tokenizer(metadata.get("tokenizer.ggml.pre", "default"))
    backend.decoder = decoders.ByteLevel()
    return backend


def _architecture_chat_template(metadata: dict) -> str | None:
    """The architecture's own turn format, for files that carry no template."""
    architecture = ARCHITECTURES.get(metadata.get("general.architecture"))
    return architecture.chat_template if architecture is not None else None


def _sentencepiece_bpe(metadata: dict) -> BackendTokenizer:
    """Spaces become "▁" (with one in front of the text where the file asks, Llama 2's way),
    text is split after each of them, and unknown characters fall back to their UTF-8 bytes
    (<0x..> tokens)."""
    tokens: list[str] = list(metadata["tokenizer.ggml.tokens"])
    architecture = ARCHITECTURES.get(metadata.get("general.architecture"))
    gemma_style = architecture is not None and architecture.spaces_spelled_out
    if gemma_style:
        # Gemma's files spell its runs-of-spaces tokens with real spaces; the text they must match
        # has them as "▁".
        tokens = ["▁" * len(token) if " " in token and not token.strip() else token for token in tokens]
        ranks = range(len(tokens))
    else:
        scores = metadata["tokenizer.ggml.scores"]
        ranks = sorted(range(len(tokens)), key=lambda index: -scores[index])
    vocab = {token: index for index, token in enumerate(tokens)}
    merges = []
    for index in ranks:
        piece = tokens[index]
        # Longest left part first, as transformers orders a piece's splits.
        merges.extend(
            (piece[:cut], piece[cut:])
            for cut in range(len(piece) - 1, 0, -1)
            if piece[:cut] in vocab and piece[cut:] in vocab
        )
    unknown = metadata.get("tokenizer.ggml.unknown_token_id")
    backend = BackendTokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            fuse_unk=True,
            unk_token=tokens[unknown] if unknown is not None else None,
            byte_fallback=True,
        )
    )
    replace_spaces = normalizers.Replace(" ", "▁")
    if metadata.get("tokenizer.ggml.add_space_prefix", not gemma_style):
        backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), replace_spaces])
    else:
        backend.normalizer = replace_spaces
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    return backend


def _gguf_pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    if pre in _DIGIT_SPLITTING_PRE:
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
    if pre in _REGEX_PRE:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_REGEX_PRE[pre]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    # "gpt2", "default" and the rest: GPT-2's own regex, the byte-level default.
    return pre_tokenizers.ByteLevel(add_prefix_space=False)


def _read_json_if_present(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path}: not valid JSON ({exc})") from exc


def _token_content(token: object) -> str | None:
    if isinstance(token, dict):
        return token.get("content")
    return token if isinstance(token, str) else None


def _raise_template_error(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)
