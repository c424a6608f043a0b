// int4 weights times activations quantized to int8, for steps of a few rows, on the CPU.
//
// torch's packed int4 kernel converts every weight to bfloat16 and multiplies by bfloat16
// activations. This product does what llama.cpp does for Q4_1 x Q8: each row of activations is
// quantized to int8 in blocks of 32 (a scale per block, symmetric), and each block of 32 weights
// is multiplied by its block of activations as integers, with AVX-512 VNNI dot products (unsigned
// 4-bit codes times signed bytes, summed in int32), then scaled once per block:
//
//   sum_k w_k x_k ~= sum_blocks [ s_w s_x sum_k q_k a_k + m_w sum_k x_k ]
//
// where w = q s_w + m_w (q in 0..15, a scale and a minimum per block of 32 inputs) and
// x ~= a s_x (a in -127..127). The minimum's term sums the quantized activations too (s_x sum_k a_k,
// as llama.cpp's Q8_1 does): the product is then exactly that of the dequantized operands, and its
// error is w times the activations' rounding. With the exact sum the error was q s_w times it, and
// q s_w = w - m_w runs about twice |w|: 0.6-1.4% relative against 0.3% for bf16 activations.
//
// Shapes:
//   x         [rows, K] float32, K a multiple of 64
//   codes     [N, K/2] uint8: for each 64 inputs, 32 bytes; byte b holds input b in its low
//             nibble and input 32 + b in its high nibble (kernels/quant_matmul.py packs it)
//   scales    [N, K/32] float16, one per block of 32 inputs
//   minimums  [N, K/32] float16
// Returns [rows, N] float32.
//
// Without AVX-512 VNNI in this build (-march=native), the same arithmetic in portable C++, built
// only there (so the test machines, which have VNNI, run the vector path); w4a8 is then an option
// that runs, not one that pays.

#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define WORKBENCH_VNNI 1
#endif

namespace {

constexpr int64_t kBlock = 32;
// Rows whose weights are unpacked once and multiplied together; more rows go round again.
constexpr int64_t kMaxRows = 8;

// One row of activations, quantized: codes, a scale per block and the block's sum as quantized.
struct QuantizedRow {
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::vector<float> sums;
};

QuantizedRow quantize_row(const float* x, int64_t K) {
  const int64_t blocks = K / kBlock;
  QuantizedRow row{std::vector<int8_t>(K), std::vector<float>(blocks), std::vector<float>(blocks)};
  for (int64_t b = 0; b < blocks; ++b) {
    const float* block = x + b * kBlock;
    int8_t* codes = row.codes.data() + b * kBlock;
#if WORKBENCH_VNNI
    const __m512 first = _mm512_loadu_ps(block), second = _mm512_loadu_ps(block + 16);
    const float largest = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(first), _mm512_abs_ps(second)));
    const __m512 inverse = _mm512_set1_ps(largest > 0.f ? 127.f / largest : 0.f);
    // Rounded to nearest, ties to even, as std::nearbyint in the portable path.
    const __m512i low = _mm512_cvtps_epi32(_mm512_mul_ps(first, inverse));
    const __m512i high = _mm512_cvtps_epi32(_mm512_mul_ps(second, inverse));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm512_cvtsepi32_epi8(low));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 16), _mm512_cvtsepi32_epi8(high));
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(low, high));
#else
    float largest = 0.f;
    for (int64_t k = 0; k < kBlock; ++k) largest = std::max(largest, std::fabs(block[k]));
    const float inverse = largest > 0.f ? 127.f / largest : 0.f;
    int32_t sum = 0;
    for (int64_t k = 0; k < kBlock; ++k) {
      codes[k] = static_cast<int8_t>(std::nearbyint(block[k] * inverse));
      sum += codes[k];
    }
#endif
    row.scales[b] = largest / 127.f;
    row.sums[b] = row.scales[b] * static_cast<float>(sum);
  }
  return row;
}

#if WORKBENCH_VNNI
// Sixteen floats: the first value in lanes 0-7, the second in lanes 8-15 (where a pair of blocks'
// dot products land).
inline __m512 spread_pair(__m128 two) {
  const __m512i lanes_of_pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(lanes_of_pair, _mm512_castps128_ps512(two));
}

// The scaled dot products of one pair of blocks (64 inputs) of one output with one row.
inline __m512 pair_product(const uint8_t* weight, const at::Half* scale, const int8_t* activations, __m512 row_scales) {
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weight));
  const __m256i low = _mm256_and_si256(packed, low_nibble);
  const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibble);
  const __m512i unpacked = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
  int32_t two_scales;
  std::memcpy(&two_scales, scale, sizeof two_scales);
  const __m512 weight_scales = spread_pair(_mm_cvtph_ps(_mm_cvtsi32_si128(two_scales)));
  const __m512i dots = _mm512_dpbusd_epi32(_mm512_setzero_si512(), unpacked, _mm512_loadu_si512(activations));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(dots), _mm512_mul_ps(weight_scales, row_scales));
}

void product_vnni(const std::vector<QuantizedRow>& rows, const std::vector<__m512>& row_scales, const uint8_t* codes,
                  const at::Half* scales, const at::Half* minimums, float* out, int64_t N, int64_t K, int64_t begin,
                  int64_t end) {
  const int64_t blocks = K / kBlock, pairs = K / 64;
  for (int64_t n = begin; n < end; ++n) {
    const uint8_t* weight = codes + n * (K / 2);
    const at::Half* scale = scales + n * blocks;
    for (size_t m = 0; m < rows.size(); ++m) {
      const int8_t* activations = rows[m].codes.data();
      const __m512* spread = row_scales.data() + m * pairs;
      // Two running sums, so that each pair's addition need not wait for the one before.
      __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
      int64_t p = 0;
      for (; p + 1 < pairs; p += 2) {
        even = _mm512_add_ps(even, pair_product(weight + p * 32, scale + 2 * p, activations + p * 64, spread[p]));
        odd = _mm512_add_ps(odd, pair_product(weight + (p + 1) * 32, scale + 2 * (p + 1), activations + (p + 1) * 64, spread[p + 1]));
      }
      if (p < pairs) even = _mm512_add_ps(even, pair_product(weight + p * 32, scale + 2 * p, activations + p * 64, spread[p]));
      // The minimums' term, sixteen blocks at a time, into the same sums.
      const float* block_sums = rows[m].sums.data();
      const at::Half* minimum = minimums + n * blocks;
      for (int64_t b = 0; b < blocks; b += 16) {
        const __mmask16 present = blocks - b >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (blocks - b)) - 1);
        const __m512 minimum_values = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(present, minimum + b));
        odd = _mm512_fmadd_ps(minimum_values, _mm512_maskz_loadu_ps(present, block_sums + b), odd);
      }
      out[m * N + n] = _mm512_reduce_add_ps(_mm512_add_ps(even, odd));
    }
  }
}
#else
inline float half_to_float(at::Half h) { return static_cast<float>(h); }

// The minimum's term of one output: sum over blocks of m_w times the block's activation sum.
inline float minimum_term(const at::Half* minimums, const float* sums, int64_t blocks) {
  float total = 0.f;
  for (int64_t b = 0; b < blocks; ++b) total += half_to_float(minimums[b]) * sums[b];
  return total;
}

void product_portable(const std::vector<QuantizedRow>& rows, const uint8_t* codes, const at::Half* scales,
                      const at::Half* minimums, float* out, int64_t N, int64_t K, int64_t begin, int64_t end) {
  const int64_t blocks = K / kBlock;
  for (int64_t n = begin; n < end; ++n) {
    const uint8_t* weight = codes + n * (K / 2);
    for (size_t m = 0; m < rows.size(); ++m) {
      const QuantizedRow& row = rows[m];
      float total = minimum_term(minimums + n * blocks, row.sums.data(), blocks);
      for (int64_t pair = 0; pair < K / 64; ++pair) {
        int32_t dots[2] = {0, 0};
        for (int64_t b = 0; b < 32; ++b) {
          const uint8_t byte = weight[pair * 32 + b];
          dots[0] += static_cast<int32_t>(byte & 0x0F) * row.codes[pair * 64 + b];
          dots[1] += static_cast<int32_t>(byte >> 4) * row.codes[pair * 64 + 32 + b];
        }
        for (int half = 0; half < 2; ++half) {
          const int64_t block = 2 * pair + half;
          total += half_to_float(scales[n * blocks + block]) * row.scales[block] * static_cast<float>(dots[half]);
        }
      }
      out[m * N + n] = total;
    }
  }
}
#endif

at::Tensor int4_product(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales, const at::Tensor& minimums) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "int4_product: x must be [rows, K] float32");
  TORCH_CHECK(codes.dim() == 2 && codes.scalar_type() == at::kByte, "int4_product: codes must be [N, K/2] uint8");
  const int64_t rows = x.size(0), K = x.size(1), N = codes.size(0);
  TORCH_CHECK(K % 64 == 0, "int4_product: K must be a multiple of 64, got ", K);
  TORCH_CHECK(codes.size(1) == K / 2, "int4_product: codes are ", codes.size(1), " bytes a row for K = ", K);
  TORCH_CHECK(scales.scalar_type() == at::kHalf && minimums.scalar_type() == at::kHalf, "int4_product: scales and minimums must be float16");
  TORCH_CHECK(scales.size(0) == N && scales.size(1) == K / kBlock && minimums.sizes() == scales.sizes(),
              "int4_product: scales and minimums must be [N, K/32]");
  const at::Tensor input = x.contiguous(), weight = codes.contiguous(), scale = scales.contiguous(), minimum = minimums.contiguous();
  at::Tensor out = at::empty({rows, N}, x.options());
  const float* in_data = input.data_ptr<float>();
  for (int64_t first = 0; first < rows; first += kMaxRows) {
    const int64_t count = std::min(kMaxRows, rows - first);
    std::vector<QuantizedRow> quantized;
    for (int64_t m = 0; m < count; ++m) quantized.push_back(quantize_row(in_data + (first + m) * K, K));
    float* out_data = out.data_ptr<float>() + first * N;
#if WORKBENCH_VNNI
    std::vector<__m512> row_scales;
    for (const QuantizedRow& row : quantized)
      for (int64_t p = 0; p < K / 64; ++p) row_scales.push_back(spread_pair(_mm_set_ps(0.f, 0.f, row.scales[2 * p + 1], row.scales[2 * p])));
#endif
    at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
#if WORKBENCH_VNNI
      product_vnni(quantized, row_scales, weight.data_ptr<uint8_t>(), scale.data_ptr<at::Half>(), minimum.data_ptr<at::Half>(), out_data, N, K, begin, end);
#else
      product_portable(quantized, weight.data_ptr<uint8_t>(), scale.data_ptr<at::Half>(), minimum.data_ptr<at::Half>(), out_data, N, K, begin, end);
#endif
    });
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(workbench, m) {
  m.def("int4_product(Tensor x, Tensor codes, Tensor scales, Tensor minimums) -> Tensor");
}

TORCH_LIBRARY_IMPL(workbench, CPU, m) { m.impl("int4_product", &int4_product); }
