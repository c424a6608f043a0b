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

    def create_linear(self, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> nn.Module:
        import bitsandbytes as bnb

        out_features, in_features = weight.shape
        module = self.layer(bnb.nn, in_features, out_features, bias is not None, weight.dtype)
        module.weight = self.parameter(bnb.nn, weight.float().cpu())
        if bias is not None:
            module.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
        return module.to(weight.device)


class BitsAndBytesInt8(_BitsAndBytes):
    name = "bnb-int8"
    description = "bitsandbytes LLM.int8() (Linear8bitLt, outlier threshold 6.0)"
    bits_per_weight = 8

    @staticmethod
    def layer(bnb_nn, in_features: int, out_features: int, bias: bool, dtype: torch.dtype) -> nn.Module:
        return bnb_nn.Linear8bitLt(in_features, out_features, bias=bias, has_fp16_weights=False, threshold=6.0)

    @staticmethod
    def parameter(bnb_nn, weight: torch.Tensor) -> nn.Parameter:
        return bnb_nn.Int8Params(weight, requires_grad=False, has_fp16_weights=False)


class BitsAndBytesNF4(_BitsAndBytes):
    name = "bnb-nf4"
    description = "bitsandbytes NF4 (Linear4bit, blocksize 64)"
    bits_per_weight = 4

    @staticmethod
    def layer(bnb_nn, in_features: int, out_features: int, bias: bool, dtype: torch.dtype) -> nn.Module:
        return bnb_nn.Linear4bit(in_features, out_features, bias=bias, quant_type="nf4", compute_dtype=dtype)

    @staticmethod
    def parameter(bnb_nn, weight: torch.Tensor) -> nn.Parameter:
        return bnb_nn.Params4bit(weight, requires_grad=False, quant_type="nf4", blocksize=64)
