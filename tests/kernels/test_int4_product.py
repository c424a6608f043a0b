"""The W4A8 operator (kernels/cpu_int4_product.cpp): int4 weights times activations quantized to
int8 per 32 inputs gives the product of the two operands as quantized and dequantized (the float64
reference), for every group size, row count and width the engine hands it, and its activation
codes are the torch reference's."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import cpu_operators
from kernels.quant import dequantize_int4, dequantize_per_block_int8, quantize_int4, quantize_per_block_int8
from kernels.quant_matmul import blockwise_int8_activations, prepare_w4a8_cpu, w4a8_matmul_cpu, w4a8_matmul_reference
from tests.kernels.references import relative_error


@pytest.fixture(autouse=True)
def operator():
    assert cpu_operators.available(), cpu_operators.unavailable_reason()


def operands(rows: int, columns: int, outputs: int, group_size: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(outputs, columns, generator=generator) / columns**0.5
    x = torch.randn(rows, columns, generator=generator) * 2
    x[:, 3] *= 40  # an outlier channel, as real activations have
    return x, quantize_int4(weight, group_size)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.sampled_from([1, 2, 7, 8, 9, 17]),
    columns=st.sampled_from([64, 576, 640, 1536]),
    outputs=st.sampled_from([1, 15, 16, 33, 192]),
    group_size=st.sampled_from([32, 64, 128]),
    seed=st.integers(0, 10_000),
)
def test_the_operator_multiplies_the_quantized_operands(rows, columns, outputs, group_size, seed):
    if columns % group_size:
        group_size = 32
    x, (packed, scales, minimums) = operands(rows, columns, outputs, group_size, seed)
    product = w4a8_matmul_cpu(x, *prepare_w4a8_cpu(packed, scales, minimums, group_size))
    expected = w4a8_matmul_reference(x, packed, scales, minimums, group_size)
    assert product.shape == (rows, outputs)
    # Float32 sums against float64: each output within a small part of the sum of its terms'
    # magnitudes (a single small output can lose digits to cancellation; one wrong code or
    # nibble moves it by far more).
    weights = dequantize_int4(packed, scales.half().float(), minimums.half().float(), group_size)
    magnitudes = blockwise_int8_activations(x).abs().double() @ weights.abs().double().T
    assert ((product.double() - expected.double()).abs() <= 1e-6 * magnitudes).all()


def test_a_zero_row_and_a_zero_block_give_exact_zeros_where_they_should():
    x, (packed, scales, minimums) = operands(2, 128, 16, 32, seed=1)
    x[0] = 0.0
    x[1, :32] = 0.0
    codes, block_scales, block_minimums = prepare_w4a8_cpu(packed, scales, minimums, 32)
    product = w4a8_matmul_cpu(x, codes, block_scales, block_minimums)
    assert torch.equal(product[0], torch.zeros(16))
    assert torch.isfinite(product).all()
    assert relative_error(product, w4a8_matmul_reference(x, packed, scales, minimums, 32)) < 2e-6


def test_the_product_is_closer_to_the_float_one_than_a_step_of_the_activations():
    """The activations' rounding is what W4A8 costs over W4A16: about 0.5% relative on Gaussian
    inputs, far from a wrong answer (a product of the wrong nibbles is off by ~140%)."""
    x, (packed, scales, minimums) = operands(4, 576, 192, 32, seed=2)
    x[:, 3] /= 40
    exact = x.double() @ dequantize_int4(packed, scales, minimums, 32).double().T
    product = w4a8_matmul_cpu(x, *prepare_w4a8_cpu(packed, scales, minimums, 32))
    assert relative_error(product, exact) < 0.01


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 5), blocks=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_activation_codes_round_each_block_to_127_over_its_largest(rows, blocks, seed):
    x = torch.randn(rows, 32 * blocks, generator=torch.Generator().manual_seed(seed)) * 5
    codes, scales = quantize_per_block_int8(x)
    assert codes.abs().amax(dim=1).eq(127).all()
    error = (dequantize_per_block_int8(codes, scales) - x).abs().view(rows, blocks, 32)
    assert (error <= scales[..., None] / 2 + 1e-6).all()


def test_torch_rounds_a_code_next_to_a_half_as_the_operator_does():
    """14.9375 * (127 / 29.875, rounded once) is 63.500004: both round it to 64. torch's
    `127.0 / largest` (a reciprocal, then a product) made it 63.499996 and 63, one code off the
    operator on Gemma 3's bf16-grid activations, enough to move a greedy token."""
    x = torch.zeros(1, 64)
    x[0, 0], x[0, 1] = 29.875, 14.9375
    codes, _ = quantize_per_block_int8(x)
    assert codes[0, :2].tolist() == [127, 64]
    # One-hot weights read the operator's own codes back: output k = code k x its block's scale.
    one_hot = torch.zeros(64, 64, dtype=torch.uint8)
    one_hot[torch.arange(64), torch.arange(64)] = 1
    from kernels.quant import pack_int4

    weights = prepare_w4a8_cpu(pack_int4(one_hot), torch.ones(64, 2), torch.zeros(64, 2), 32)
    read_back = w4a8_matmul_cpu(x, *weights)[0, :2] / (29.875 / 127)
    assert read_back.round().tolist() == [127.0, 64.0]
