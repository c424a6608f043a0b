"""Quantize -> dequantize round trips stay within their step size; the int4 packing is the
documented layout; the CPU packed kernels agree with the references."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.quant import (
    dequantize_int4,
    dequantize_int8,
    pack_int4,
    quantize_int4,
    quantize_int8,
    quantize_per_token_int8,
    unpack_int4,
)
from kernels.quant_matmul import (
    int4_matmul_cpu,
    int4_matmul_reference,
    int8_matmul_cpu,
    int8_matmul_reference,
    prepare_int4_cpu,
    w8a8_matmul_cpu,
    w8a8_matmul_reference,
)
from tests.kernels.references import relative_error


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 40), columns=st.sampled_from([32, 64, 96, 576]), seed=st.integers(0, 10_000))
def test_int8_round_trip_error_is_at_most_half_a_step(rows, columns, seed):
    weight = torch.randn(rows, columns, generator=torch.Generator().manual_seed(seed)) * 3
    q, scales = quantize_int8(weight)
    assert q.dtype == torch.int8 and q.abs().max() <= 127
    error = (dequantize_int8(q, scales) - weight).abs()
    assert (error <= scales[:, None] / 2 + 1e-6).all()


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(1, 40),
    group_size=st.sampled_from([32, 64, 128]),
    groups=st.integers(1, 5),
    seed=st.integers(0, 10_000),
)
def test_int4_round_trip_error_is_within_one_step(rows, group_size, groups, seed):
    weight = torch.randn(rows, group_size * groups, generator=torch.Generator().manual_seed(seed))
    packed, scales, minimums = quantize_int4(weight, group_size)
    assert packed.dtype == torch.uint8 and packed.shape == (rows, group_size * groups // 2)
    assert scales.shape == minimums.shape == (rows, groups)
    error = (dequantize_int4(packed, scales, minimums, group_size) - weight).abs().view(rows, groups, group_size)
    assert (error <= scales[..., None] / 2 + 1e-5).all()  # rounding to the nearest level


def test_int4_packing_layout_even_column_in_the_low_nibble():
    values = torch.tensor([[1, 2, 15, 0, 7, 8]], dtype=torch.uint8)
    packed = pack_int4(values)
    assert packed.tolist() == [[0x21, 0x0F, 0x87]]
    assert torch.equal(unpack_int4(packed), values)


def test_int4_of_a_q4_1_weight_is_exact_with_group_32():
    # Q4_1 stores w = q * d + m per 32 weights, with any float d and m: group 32 gives it back.
    generator = torch.Generator().manual_seed(0)
    levels = torch.randint(0, 16, (8, 64), generator=generator).float()
    levels[:, 0], levels[:, 1], levels[:, 32], levels[:, 33] = 0, 15, 0, 15  # every group spans all 16 levels
    d = torch.rand(8, 2, 1, generator=generator) * 0.02 + 0.001
    m = torch.randn(8, 2, 1, generator=generator) * 0.1
    weight = (levels.view(8, 2, 32) * d + m).view(8, 64)
    packed, scales, minimums = quantize_int4(weight, 32)
    assert torch.allclose(dequantize_int4(packed, scales, minimums, 32), weight, atol=1e-6)


def weight_and_input(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A 576 -> 192 projection's weight and `rows` tokens of input, seeded by `rows`."""
    generator = torch.Generator().manual_seed(rows)
    return torch.randn(192, 576, generator=generator), torch.randn(rows, 576, generator=generator)


@pytest.mark.parametrize("rows", [1, 7, 64])
def test_cpu_packed_kernels_agree_with_the_references(rows):
    weight, x = weight_and_input(rows)
    q, scales = quantize_int8(weight)
    actual = int8_matmul_cpu(x, q, scales.to(torch.bfloat16))
    assert relative_error(actual, int8_matmul_reference(x, q, scales)) < 1e-2  # bf16 activations
    packed, scales4, minimums4 = quantize_int4(weight, 64)
    actual4 = int4_matmul_cpu(x, *prepare_int4_cpu(packed, scales4, minimums4), 64, 192)
    assert relative_error(actual4, int4_matmul_reference(x, packed, scales4, minimums4, 64)) < 1e-2


def test_one_row_int8_product_in_a_compiled_graph_is_the_float32_reduction():
    """Inside a compiled graph one row takes the reduction form (float32 activations, not the
    packed kernel's bf16): it equals the float32 reference to float rounding, far closer than the
    packed kernel's 1e-2."""
    weight, x = weight_and_input(1)
    q, scales = quantize_int8(weight)
    scales_bf16 = scales.to(torch.bfloat16)
    compiled = torch.compile(int8_matmul_cpu, dynamic=False)
    actual = compiled(x, q, scales_bf16)
    assert relative_error(actual, int8_matmul_reference(x, q, scales_bf16.float())) < 1e-5


def test_per_token_int8_is_within_half_a_step_per_row_and_rows_are_independent():
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(6, 96, generator=generator) * torch.tensor([1e-3, 1.0, 5.0, 30.0, 1.0, 0.0])[:, None]
    q, scales = quantize_per_token_int8(x)
    assert q.dtype == torch.int8 and scales.shape == (6, 1)
    assert q.abs().amax(dim=1)[:4].eq(127).all()  # each non-zero row uses the whole range
    assert ((q.float() * scales - x).abs() <= scales / 2 * (1 + 1e-5)).all()
    assert q[5].eq(0).all()  # an all-zero row stays zero
    alone, _ = quantize_per_token_int8(x[1:2])
    assert torch.equal(alone, q[1:2])  # a row's quantization ignores its batch mates


@pytest.mark.parametrize("rows", [1, 7, 64])
def test_w8a8_cpu_product_is_the_exact_integer_product_scaled(rows):
    weight, x = weight_and_input(rows)
    q, scales = quantize_int8(weight)
    actual = w8a8_matmul_cpu(x, q, scales)
    assert relative_error(actual, w8a8_matmul_reference(x, q, scales)) < 1e-6
    assert relative_error(actual, x @ weight.T) < 2e-2  # and the whole scheme stays close to the unquantized product
    assert torch.equal(w8a8_matmul_cpu(x[:1], q, scales), actual[:1])  # batch-invariant, bit for bit
