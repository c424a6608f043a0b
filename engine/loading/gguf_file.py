"""The GGUF container: its metadata and its tensor directory, read straight from a memory map.

The format (ggml's docs/gguf.md): magic "GGUF", version, tensor and key counts, the key/value
metadata, one entry per tensor (name, dimensions innermost first, type, offset), then the tensor
data from an aligned offset. The `gguf` package's `GGUFReader` reads the same, but builds two numpy
arrays per string, which on Gemma 3's 262,144-token vocabulary takes many times as long as this
reader (docs/measurements.md, "Figures behind the code"). The `gguf` package still does the
dequantization and knows each type's block size.

Tensors are views of the memory map (nothing is copied until a caller dequantizes).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from engine.errors import ModelLoadError

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
# Metadata value types (ggml's gguf_type) -> struct format of a scalar; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
# Tensor types numpy holds as they are; the others are dequantized through the gguf package.
_PLAIN_TYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I8": np.int8,
    "I16": np.int16,
    "I32": np.int32,
}


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    tensor_type: gguf.GGMLQuantizationType
    shape: tuple[int, ...]  # outermost first, as numpy and torch index it (GGUF lists innermost first)
    data: np.ndarray  # float types: the values; block types: uint8, one row of blocks per last-axis row


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    metadata: dict
    tensors: list[GGUFTensor]


class _Cursor:
    def __init__(self, buffer, path: Path):
        self.buffer, self.offset, self.path = buffer, 0, path

    def take(self, size: int) -> memoryview:
        end = self.offset + size
        if end > len(self.buffer):
            raise ModelLoadError(
                f"{self.path}: the file ends inside its header (at byte {len(self.buffer):,}); truncated"
            )
        view = self.buffer[self.offset : end]
        self.offset = end
        return view

    def scalar(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        raw = self.take(self.scalar("Q"))
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            return bytes(raw).decode("utf-8", errors="replace")

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, count = self.scalar("I"), self.scalar("Q")
            if item_kind in _SCALARS and item_kind != 7:  # numbers: one numpy view, not a list
                dtype = np.dtype("<" + _SCALARS[item_kind])
                return np.frombuffer(self.take(count * dtype.itemsize), dtype=dtype).tolist()
            return [self.value(item_kind) for _ in range(count)]
        raise ModelLoadError(f"{self.path}: metadata value of unknown type {kind} at byte {self.offset:,}")


def read_gguf_file(path: Path, *, with_tensors: bool = True) -> GGUFFile:
    """The file's metadata and (unless with_tensors is False) its tensors, as views of a read-only
    memory map. A truncated or damaged file raises ModelLoadError naming the file and what is wrong."""
    try:
        with open(path, "rb") as handle:
            buffer = memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        raise ModelLoadError(f"{path}: not a readable GGUF file ({exc})") from exc
    cursor = _Cursor(buffer, path)
    if bytes(cursor.take(4)) != _MAGIC:
        raise ModelLoadError(f"{path}: not a readable GGUF file (it does not start with the magic bytes 'GGUF')")
    version = cursor.scalar("I")
    if version < 2:
        raise ModelLoadError(f"{path}: GGUF version {version}; versions 2 and 3 are supported")
    tensor_count, key_count = cursor.scalar("Q"), cursor.scalar("Q")
    metadata = {}
    for _ in range(key_count):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.scalar("I"))
    if not with_tensors:
        return GGUFFile(path, metadata, [])
    entries = []
    for _ in range(tensor_count):
        name = cursor.string()
        dims = [cursor.scalar("Q") for _ in range(cursor.scalar("I"))]
        entries.append((name, dims, cursor.scalar("I"), cursor.scalar("Q")))
    alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT))
    data_start = -(-cursor.offset // alignment) * alignment
    tensors = [_tensor(buffer, path, data_start, *entry) for entry in entries]
    return GGUFFile(path, metadata, tensors)


def _tensor(buffer, path: Path, data_start: int, name: str, dims: list[int], kind: int, offset: int) -> GGUFTensor:
    try:
        tensor_type = gguf.GGMLQuantizationType(kind)
    except ValueError as exc:
        raise ModelLoadError(f"{path}: tensor {name} has unknown type {kind}") from exc
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[tensor_type]
    shape = tuple(reversed(dims))
    elements = int(np.prod(shape))
    size = elements // block_size * block_bytes
    start = data_start + offset
    if start + size > len(buffer):
        raise ModelLoadError(
            f"{path}: tensor {name} needs bytes {start:,} to {start + size:,} but the file has {len(buffer):,}; "
            "the file is truncated"
        )
    raw = np.frombuffer(buffer[start : start + size], dtype=np.uint8)
    if tensor_type.name in _PLAIN_TYPES:
        data = raw.view(_PLAIN_TYPES[tensor_type.name]).reshape(shape)
    else:  # blocks (and BF16): bytes per row, as gguf.quants.dequantize takes them
        data = raw.reshape(*shape[:-1], shape[-1] // block_size * block_bytes)
    return GGUFTensor(name, tensor_type, shape, data)
