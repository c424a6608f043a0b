"""bitsandbytes' own layers, for comparison: LLM.int8() (Linear8bitLt, outlier threshold 6.0)
and NF4 (Linear4bit, blocksize 64). They need bitsandbytes' native library (CUDA)."""

from __future__ import annotations

import torch
from torch import nn

from engine.quantization.base import QuantizationMethod


class _BitsAndBytes(QuantizationMethod):
    quantizes_lm_head = False
    own_kernels = False

    def unavailable_reason(self) -> str | None:
        try:
            import bitsandbytes  # noqa: F401
        except Exception as exc:  # bitsandbytes raises assorted errors where its native library cannot load
            return f"needs bitsandbytes: {exc}; choose int8 or int4"
        return None


class BitsAndBytesInt8(_BitsAndBytes):
    name = "bnb-int8"
    description = "bitsandbytes LLM.int8() (Linear8bitLt, outlier threshold 6.0)"
    bits_per_weight = 8

    def create_linear(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> nn.Module:
        import bitsandbytes as bnb

        out_features, in_features = weight.shape
        module = bnb.nn.Linear8bitLt(in_features, out_features, bias=bias is not None, has_fp16_weights=False, threshold=6.0)
        module.weight = bnb.nn.Int8Params(weight.float().cpu(), requires_grad=False, has_fp16_weights=False)
        return _with_bias(module, bias).to(weight.device)


class BitsAndBytesNF4(_BitsAndBytes):
    name = "bnb-nf4"
    description = "bitsandbytes NF4 (Linear4bit, blocksize 64)"
    bits_per_weight = 4

    def create_linear(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> nn.Module:
        import bitsandbytes as bnb

        out_features, in_features = weight.shape
        module = bnb.nn.Linear4bit(in_features, out_features, bias=bias is not None, quant_type="nf4", compute_dtype=weight.dtype)
        module.weight = bnb.nn.Params4bit(weight.float().cpu(), requires_grad=False, quant_type="nf4", blocksize=64)
        return _with_bias(module, bias).to(weight.device)


def _with_bias(module: nn.Module, bias: torch.Tensor | None) -> nn.Module:
    if bias is not None:
        module.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
    return module
