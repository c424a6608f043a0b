// Decode attention that reads the paged KV cache in place, on the CPU.
//
// One work item per (sequence, KV head): the item reads each visible key once, scoring it against
// all of that KV head's query heads (grouped-query attention), then each visible value once,
// weighting it by the softmax of the scores. Nothing is gathered or padded: a sequence reads
// exactly its own blocks, each position once, in the cache's dtype (bfloat16, float32, or int8 or
// fp8 e4m3 codes with a float16 scale per row: kernels/quantized_kv.py), converted to float32 a
// row at a time; scores and sums are float32. An 8-bit row's scale multiplies its score (keys) or its
// softmax weight (values) once, after the dot product or before the weighted sum. Long contexts are split
// into chunks so that one sequence keeps every core busy.
//
// Two ways through a chunk, the same arithmetic in a different order:
// - with AVX-512 (this build's -march=native says so) and head_dim a multiple of 16: sixteen
//   positions are scored together (one vector of partial sums per position, summed across lanes
//   for all sixteen at once), the exponentials are taken sixteen at a time, and each value row is
//   added into accumulators held in registers (the timings against the portable path:
//   docs/measurements.md, "Decode attention sixteen positions at a time").
// - otherwise, portable C++ the compiler vectorises one row at a time.
//
// Shapes (the same contract as kernels/paged_attention.py's paged_decode_attention):
//   query         [num_seqs, num_heads, head_dim]         float32 or bfloat16
//   key_cache     [num_blocks, block_size, kv_heads, head_dim]  float32, bfloat16, int8 or float8_e4m3fn
//   value_cache   like key_cache
//   key_scales    for 8-bit caches: [num_blocks, block_size, kv_heads] float16; else none
//   value_scales  like key_scales
//   block_tables  [num_seqs, max_blocks] int64
//   context_lens  [num_seqs] int64, the new token included
//   window        0 for full attention, else the sliding window (positions p - window + 1 .. p)
// Returns [num_seqs, num_heads, head_dim] in the query's dtype.

#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

// Up to this many query heads share a KV head (SmolLM2: 3, Gemma 3 270M: 4).
constexpr int kMaxGroup = 16;
constexpr int kMaxHeadDim = 256;

// A row of the cache as float32 (for bfloat16, a shift of its bits, which the compiler vectorises).
inline void load_row(const float* row, float* out, int64_t n) { std::memcpy(out, row, n * sizeof(float)); }

inline void load_row(const c10::BFloat16* row, float* out, int64_t n) {
  const uint16_t* raw = reinterpret_cast<const uint16_t*>(row);
  uint32_t bits[kMaxHeadDim];
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) bits[d] = static_cast<uint32_t>(raw[d]) << 16;
  std::memcpy(out, bits, n * sizeof(float));  // not through a cast pointer: that breaks aliasing rules
}

inline void load_row(const int8_t* row, float* out, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) out[d] = static_cast<float>(row[d]);
}

// An fp8 e4m3 code as float32, without fp8 arithmetic (which CPUs lack): the code sign-extended to
// 32 bits and shifted left by 20 puts its sign at float32's sign bit and its exponent and mantissa
// at the top of float32's (the mask clears the copies of the sign between them); times 2^120 (the
// exponents' biases differ by 127 - 7) that is the code's value, its subnormals included. No cache
// holds 0x7f or 0xff (NaN): codes are clamped to +-448 when written.
constexpr float kFp8ExponentShift = 0x1p120f;
constexpr uint32_t kFp8BitsMask = 0x87F00000u;

inline void load_row(const c10::Float8_e4m3fn* row, float* out, int64_t n) {
  const int8_t* raw = reinterpret_cast<const int8_t*>(row);
  uint32_t bits[kMaxHeadDim];
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) bits[d] = (static_cast<uint32_t>(static_cast<int32_t>(raw[d])) << 20) & kFp8BitsMask;
  std::memcpy(out, bits, n * sizeof(float));
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) out[d] *= kFp8ExponentShift;
}

// The scale of the row at `element` (its first number's index in the cache), or 1 without scales.
inline float row_scale(const c10::Half* scales, int64_t element, int64_t head_dim) {
  return scales == nullptr ? 1.f : static_cast<float>(scales[element / head_dim]);
}

inline float to_float(float x) { return x; }
inline float to_float(c10::BFloat16 x) { return static_cast<float>(x); }

// A long context is split into chunks of this many positions, each its own work item, merged at
// the end (as flash-decoding does): one sequence's few KV heads would otherwise leave cores idle.
// At 256, SmolLM2's 3 KV heads make 12 items of a 1,024-token sequence, not 3 (of which, on two
// cores, one core took two).
constexpr int64_t kChunk = 256;

// One chunk's softmax state per query head, `head_dim + 2` floats: the maximum score, the sum of
// exponentials and the weighted sum of values, both relative to that maximum.
inline float* partial_of(float* partials, int64_t item, int64_t g, int64_t group, int64_t head_dim) {
  return partials + (item * group + g) * (head_dim + 2);
}

template <typename cache_t>
void attend_chunk_portable(const float (&q)[kMaxGroup][kMaxHeadDim], const cache_t* key_cache, const cache_t* value_cache,
                  const int64_t* table, int64_t from, int64_t to, int64_t group, int64_t head_dim,
                  int64_t block_size, int64_t token_stride, int64_t block_stride, int64_t head_offset,
                  const c10::Half* key_scales, const c10::Half* value_scales,
                  std::vector<float>& scores, float* partials, int64_t item) {
  const int64_t count = to - from;
  scores.resize(group * count);
  float row[kMaxHeadDim];
  float maxima[kMaxGroup];
  std::fill(maxima, maxima + group, -std::numeric_limits<float>::infinity());
  for (int64_t p = from; p < to; ++p) {
    const int64_t element = table[p / block_size] * block_stride + (p % block_size) * token_stride + head_offset;
    load_row(key_cache + element, row, head_dim);
    const float key_scale = row_scale(key_scales, element, head_dim);
    for (int64_t g = 0; g < group; ++g) {
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < head_dim; ++d) dot += q[g][d] * row[d];
      dot *= key_scale;
      scores[g * count + (p - from)] = dot;
      maxima[g] = std::max(maxima[g], dot);
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float sum = 0.f;
    float* weights = scores.data() + g * count;
    for (int64_t i = 0; i < count; ++i) {
      weights[i] = std::exp(weights[i] - maxima[g]);
      sum += weights[i];
    }
    float* partial = partial_of(partials, item, g, group, head_dim);
    partial[0] = maxima[g];
    partial[1] = sum;
    std::fill(partial + 2, partial + 2 + head_dim, 0.f);
  }
  for (int64_t p = from; p < to; ++p) {
    const int64_t element = table[p / block_size] * block_stride + (p % block_size) * token_stride + head_offset;
    load_row(value_cache + element, row, head_dim);
    const float value_scale = row_scale(value_scales, element, head_dim);
    for (int64_t g = 0; g < group; ++g) {
      const float weight = scores[g * count + (p - from)] * value_scale;
      float* target = partial_of(partials, item, g, group, head_dim) + 2;
#pragma omp simd
      for (int64_t d = 0; d < head_dim; ++d) target[d] += weight * row[d];
    }
  }
}

#if defined(__AVX512F__)
constexpr bool kVectorPath = true;

// Sixteen float32 lanes of a cache row.
inline __m512 load16(const float* row) { return _mm512_loadu_ps(row); }

inline __m512 load16(const int8_t* row) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row))));
}

inline __m512 load16(const c10::Float8_e4m3fn* row) {
  const __m512i codes = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
  const __m512i bits = _mm512_and_si512(_mm512_slli_epi32(codes, 20), _mm512_set1_epi32(static_cast<int>(kFp8BitsMask)));
  return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(kFp8ExponentShift));
}

inline __m512 load16(const c10::BFloat16* row) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// Lane j of the result: the sum of the sixteen lanes of sums[j] (a transpose folded into the adds).
inline __m512 sum_each(const __m512 (&sums)[16]) {
  __m512 pairs[8], quads[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(sums[2 * i], sums[2 * i + 1]),
                             _mm512_unpackhi_ps(sums[2 * i], sums[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: [a, b, c, d], each that lane's four summed
    const __m512d left = _mm512_castps_pd(pairs[2 * i]), right = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(left, right)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(left, right)));
  }
  // Across the four 128-bit lanes: halves first, then the rest, landing sums[4i + k] in lane 4i + k.
  const __m512 low = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 high = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(low, high, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(low, high, _MM_SHUFFLE(3, 1, 3, 1)));
}

// e^x, sixteen at a time, within about 2 ulp of std::exp: x = n ln2 + r with |r| <= ln2 / 2
// (ln2 in two parts, so that r keeps its low bits), e^r by its Taylor series to r^7 (the next
// term is under 6e-9 relative), and 2^n applied by scalef. Below -104, e^x is 0 in float32.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.f));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040);
  for (const float c : {1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 first_lanes(int64_t n) { return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1); }

// Adds `weights[g][p] * value row p` over the chunk's positions into the accumulators of four
// query heads and `columns` x 16 columns starting at `column`; held in registers throughout.
template <int columns, typename cache_t>
void add_values(const cache_t* const* rows, int64_t count, const float* const (&weights)[4], int64_t column,
                float* const (&targets)[4], int64_t heads) {
  __m512 acc[4][columns];
  for (int g = 0; g < 4; ++g)
    for (int c = 0; c < columns; ++c) acc[g][c] = _mm512_setzero_ps();
  for (int64_t i = 0; i < count; ++i) {
    __m512 row[columns];
    for (int c = 0; c < columns; ++c) row[c] = load16(rows[i] + column + 16 * c);
    for (int g = 0; g < 4; ++g) {
      const __m512 weight = _mm512_set1_ps(weights[g][i]);
      for (int c = 0; c < columns; ++c) acc[g][c] = _mm512_fmadd_ps(weight, row[c], acc[g][c]);
    }
  }
  for (int64_t g = 0; g < heads; ++g)
    for (int c = 0; c < columns; ++c) _mm512_storeu_ps(targets[g] + column + 16 * c, acc[g][c]);
}

template <typename cache_t>
void attend_chunk_vector(const float (&q)[kMaxGroup][kMaxHeadDim], const cache_t* key_cache,
                         const cache_t* value_cache, const int64_t* table, int64_t from, int64_t to, int64_t group,
                         int64_t head_dim, int64_t block_size, int64_t token_stride, int64_t block_stride,
                         int64_t head_offset, const c10::Half* key_scales, const c10::Half* value_scales,
                         std::vector<float>& scores, std::vector<const cache_t*>& keys,
                         std::vector<const cache_t*>& values, std::vector<float>& row_scales, float* partials,
                         int64_t item) {
  const int64_t count = to - from;
  const int64_t padded_group = (group + 3) / 4 * 4;  // value accumulation takes four heads at a time
  scores.assign(padded_group * count, 0.f);
  keys.resize(count);
  values.resize(count);
  const bool scaled = key_scales != nullptr;
  row_scales.resize(scaled ? 2 * count : 0);  // the keys' scales, then the values'
  for (int64_t i = 0; i < count; ++i) {
    const int64_t p = from + i, offset = table[p / block_size] * block_stride + (p % block_size) * token_stride;
    keys[i] = key_cache + offset + head_offset;
    values[i] = value_cache + offset + head_offset;
    if (scaled) {
      row_scales[i] = row_scale(key_scales, offset + head_offset, head_dim);
      row_scales[count + i] = row_scale(value_scales, offset + head_offset, head_dim);
    }
  }
  // Scores, sixteen positions at a time; past the chunk's end, a row of zeros stands in.
  alignas(64) static const cache_t zeros[kMaxHeadDim] = {};
  const int64_t row_bytes = head_dim * static_cast<int64_t>(sizeof(cache_t));
  for (int64_t start = 0; start < count; start += 16) {
    const int64_t n = std::min<int64_t>(16, count - start);
    const cache_t* tile[16];
    for (int64_t j = 0; j < 16; ++j) tile[j] = j < n ? keys[start + j] : zeros;
    // Ask for the next sixteen keys now, and for this tile's values into L2 for the value pass:
    // one KV head's rows are a few hundred bytes apart and blocks anywhere in the pool, which the
    // hardware prefetcher does not follow; a single long sequence read at 5-8 GB/s without this.
    for (int64_t j = start + 16; j < std::min<int64_t>(count, start + 32); ++j)
      for (int64_t byte = 0; byte < row_bytes; byte += 64)
        _mm_prefetch(reinterpret_cast<const char*>(keys[j]) + byte, _MM_HINT_T0);
    for (int64_t j = start; j < start + n; ++j)
      for (int64_t byte = 0; byte < row_bytes; byte += 64)
        _mm_prefetch(reinterpret_cast<const char*>(values[j]) + byte, _MM_HINT_T1);
    for (int64_t g = 0; g < group; ++g) {
      __m512 sums[16];
      for (int j = 0; j < 16; ++j) sums[j] = _mm512_setzero_ps();
      for (int64_t d = 0; d < head_dim; d += 16) {
        const __m512 query = _mm512_loadu_ps(&q[g][d]);
        for (int j = 0; j < 16; ++j) sums[j] = _mm512_fmadd_ps(query, load16(tile[j] + d), sums[j]);
      }
      __m512 tile_scores = sum_each(sums);
      if (scaled) tile_scores = _mm512_mul_ps(tile_scores, _mm512_maskz_loadu_ps(first_lanes(n), &row_scales[start]));
      _mm512_mask_storeu_ps(scores.data() + g * count + start, first_lanes(n), tile_scores);
    }
  }
  // Softmax numerators relative to each head's maximum, and their sums.
  for (int64_t g = 0; g < group; ++g) {
    float* weights = scores.data() + g * count;
    __m512 maxima = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t i = 0; i < count; i += 16)
      maxima = _mm512_max_ps(maxima, _mm512_mask_loadu_ps(maxima, first_lanes(count - i), weights + i));
    const float maximum = _mm512_reduce_max_ps(maxima);
    __m512 sums = _mm512_setzero_ps();
    for (int64_t i = 0; i < count; i += 16) {
      const __mmask16 lanes = first_lanes(count - i);
      const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, weights + i), _mm512_set1_ps(maximum)));
      _mm512_mask_storeu_ps(weights + i, lanes, e);
      sums = _mm512_add_ps(sums, _mm512_maskz_mov_ps(lanes, e));
    }
    float* partial = partial_of(partials, item, g, group, head_dim);
    partial[0] = maximum;
    partial[1] = _mm512_reduce_add_ps(sums);
    if (scaled)  // the values' scales join the weights after the sum, which they are not part of
      for (int64_t i = 0; i < count; ++i) weights[i] *= row_scales[count + i];
  }
  // Values: four query heads and up to 64 columns per pass over the chunk.
  for (int64_t g0 = 0; g0 < group; g0 += 4) {
    const float* const weights[4] = {&scores[g0 * count], &scores[(g0 + 1) * count], &scores[(g0 + 2) * count],
                                     &scores[(g0 + 3) * count]};
    float* targets[4];
    for (int64_t g = 0; g < 4; ++g) targets[g] = partial_of(partials, item, std::min(g0 + g, group - 1), group, head_dim) + 2;
    const int64_t heads = std::min<int64_t>(4, group - g0);
    for (int64_t column = 0; column < head_dim; column += 64) {
      switch (std::min<int64_t>(4, (head_dim - column) / 16)) {
        case 4: add_values<4>(values.data(), count, weights, column, targets, heads); break;
        case 3: add_values<3>(values.data(), count, weights, column, targets, heads); break;
        case 2: add_values<2>(values.data(), count, weights, column, targets, heads); break;
        default: add_values<1>(values.data(), count, weights, column, targets, heads); break;
      }
    }
  }
}
#else
constexpr bool kVectorPath = false;
#endif

template <typename cache_t, typename query_t>
void attend(const query_t* query, const cache_t* key_cache, const cache_t* value_cache,
            const c10::Half* key_scales, const c10::Half* value_scales, const int64_t* block_tables,
            const int64_t* context_lens, query_t* out, int64_t num_seqs, int64_t num_heads, int64_t kv_heads,
            int64_t head_dim, int64_t block_size, int64_t max_blocks, double scale, int64_t window) {
  const int64_t group = num_heads / kv_heads;
  [[maybe_unused]] const bool vector_path = kVectorPath && head_dim % 16 == 0;
  const int64_t token_stride = kv_heads * head_dim;  // between positions of one block
  const int64_t block_stride = block_size * token_stride;
  // Work items: (sequence, KV head, chunk of its visible positions).
  std::vector<int64_t> first(num_seqs), item_start(num_seqs + 1, 0);
  for (int64_t seq = 0; seq < num_seqs; ++seq) {
    first[seq] = window > 0 ? std::max<int64_t>(0, context_lens[seq] - window) : 0;
    const int64_t chunks = std::max<int64_t>(1, (context_lens[seq] - first[seq] + kChunk - 1) / kChunk);
    item_start[seq + 1] = item_start[seq] + chunks * kv_heads;
  }
  std::unique_ptr<float[]> partials(new float[item_start[num_seqs] * group * (head_dim + 2)]);
  at::parallel_for(0, item_start[num_seqs], 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;  // the chunk's scores, then weights; with the row pointers, reused per item
    std::vector<const cache_t*> keys, values;
    std::vector<float> row_scales;
    float q[kMaxGroup][kMaxHeadDim];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t seq = std::upper_bound(item_start.begin(), item_start.end(), item) - item_start.begin() - 1;
      const int64_t local = item - item_start[seq];
      const int64_t kv_head = local % kv_heads, chunk = local / kv_heads;
      const int64_t from = first[seq] + chunk * kChunk;
      const int64_t to = std::min(context_lens[seq], from + kChunk);
      for (int64_t g = 0; g < group; ++g) {
        const query_t* row = query + (seq * num_heads + kv_head * group + g) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) q[g][d] = to_float(row[d]) * static_cast<float>(scale);
      }
      const int64_t* table = block_tables + seq * max_blocks;
#if defined(__AVX512F__)
      if (vector_path) {
        attend_chunk_vector(q, key_cache, value_cache, table, from, to, group, head_dim, block_size, token_stride,
                            block_stride, kv_head * head_dim, key_scales, value_scales, scores, keys, values,
                            row_scales, partials.get(), item);
        continue;
      }
#endif
      attend_chunk_portable(q, key_cache, value_cache, table, from, to, group, head_dim, block_size, token_stride,
                            block_stride, kv_head * head_dim, key_scales, value_scales, scores, partials.get(), item);
    }
  });
  // Merge each sequence's chunks: rescale every chunk to the overall maximum.
  at::parallel_for(0, num_seqs * kv_heads, 1, [&](int64_t begin, int64_t end) {
    float acc[kMaxHeadDim];
    for (int64_t index = begin; index < end; ++index) {
      const int64_t seq = index / kv_heads, kv_head = index % kv_heads;
      const int64_t chunks = (item_start[seq + 1] - item_start[seq]) / kv_heads;
      for (int64_t g = 0; g < group; ++g) {
        float maximum = -std::numeric_limits<float>::infinity();
        for (int64_t c = 0; c < chunks; ++c)
          maximum = std::max(maximum, partial_of(partials.get(), item_start[seq] + c * kv_heads + kv_head, g, group,
                                                 head_dim)[0]);
        float sum = 0.f;
        std::fill(acc, acc + head_dim, 0.f);
        for (int64_t c = 0; c < chunks; ++c) {
          const float* part = partial_of(partials.get(), item_start[seq] + c * kv_heads + kv_head, g, group, head_dim);
          const float factor = std::exp(part[0] - maximum);
          sum += part[1] * factor;
          for (int64_t d = 0; d < head_dim; ++d) acc[d] += part[2 + d] * factor;
        }
        query_t* row = out + (seq * num_heads + kv_head * group + g) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) row[d] = static_cast<query_t>(acc[d] / sum);
      }
    }
  });
}

template <typename query_t>
void dispatch_cache(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                    const c10::Half* key_scales, const c10::Half* value_scales, const at::Tensor& block_tables,
                    const at::Tensor& context_lens, at::Tensor& out, double scale, int64_t window) {
  auto run = [&](auto cache_type_tag) {
    using cache_t = decltype(cache_type_tag);
    attend<cache_t, query_t>(query.data_ptr<query_t>(), key_cache.data_ptr<cache_t>(), value_cache.data_ptr<cache_t>(),
                             key_scales, value_scales, block_tables.data_ptr<int64_t>(),
                             context_lens.data_ptr<int64_t>(), out.data_ptr<query_t>(), query.size(0), query.size(1),
                             key_cache.size(2), query.size(2), key_cache.size(1), block_tables.size(1), scale, window);
  };
  if (key_cache.scalar_type() == at::kBFloat16) {
    run(c10::BFloat16());
  } else if (key_cache.scalar_type() == at::kChar) {
    run(int8_t());
  } else if (key_cache.scalar_type() == at::kFloat8_e4m3fn) {
    run(c10::Float8_e4m3fn());
  } else {
    run(float());
  }
}

bool holds_codes(const at::Tensor& cache) {
  return cache.scalar_type() == at::kChar || cache.scalar_type() == at::kFloat8_e4m3fn;
}

// An 8-bit cache's scales, checked against its codes; nullptr for a float cache.
const c10::Half* scales_of(const at::Tensor& cache, const std::optional<at::Tensor>& scales, const char* name) {
  const bool codes = holds_codes(cache);
  TORCH_CHECK(codes == scales.has_value(), name, ": 8-bit caches need scales, other caches take none");
  if (!codes) return nullptr;
  TORCH_CHECK(scales->scalar_type() == at::kHalf && scales->is_contiguous(), name, ": contiguous float16");
  TORCH_CHECK(scales->sizes() == cache.sizes().slice(0, 3), name, ": one per row, [blocks, block_size, kv_heads]");
  return scales->data_ptr<c10::Half>();
}

at::Tensor paged_decode_attention(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                  const at::Tensor& block_tables, const at::Tensor& context_lens, double scale,
                                  int64_t window, const std::optional<at::Tensor>& key_scales,
                                  const std::optional<at::Tensor>& value_scales) {
  TORCH_CHECK(query.dim() == 3 && key_cache.dim() == 4, "query [seqs, heads, dim], cache [blocks, size, kv_heads, dim]");
  TORCH_CHECK(key_cache.scalar_type() == value_cache.scalar_type(), "key and value caches differ in dtype");
  TORCH_CHECK(key_cache.scalar_type() == at::kBFloat16 || key_cache.scalar_type() == at::kFloat ||
                  holds_codes(key_cache),
              "cache dtype: bfloat16, float32, int8 or float8_e4m3fn");
  TORCH_CHECK(query.scalar_type() == at::kBFloat16 || query.scalar_type() == at::kFloat,
              "query dtype: bfloat16 or float32");
  TORCH_CHECK(query.size(1) % key_cache.size(2) == 0 && query.size(1) / key_cache.size(2) <= kMaxGroup,
              "query heads per KV head: at most ", kMaxGroup);
  TORCH_CHECK(query.size(2) <= kMaxHeadDim, "head_dim: at most ", kMaxHeadDim);
  TORCH_CHECK(key_cache.is_contiguous() && value_cache.is_contiguous(), "caches must be contiguous");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && context_lens.scalar_type() == at::kLong,
              "block tables and context lengths: int64");
  const at::Tensor q = query.contiguous();
  const at::Tensor tables = block_tables.contiguous();
  const at::Tensor lengths = context_lens.contiguous();
  const c10::Half* key_scale_data = scales_of(key_cache, key_scales, "key_scales");
  const c10::Half* value_scale_data = scales_of(value_cache, value_scales, "value_scales");
  at::Tensor out = at::empty_like(q);
  if (q.scalar_type() == at::kBFloat16) {
    dispatch_cache<c10::BFloat16>(q, key_cache, value_cache, key_scale_data, value_scale_data, tables, lengths, out,
                                  scale, window);
  } else {
    dispatch_cache<float>(q, key_cache, value_cache, key_scale_data, value_scale_data, tables, lengths, out, scale,
                          window);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(workbench, m) {
  m.def(
      "paged_decode_attention(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, "
      "Tensor context_lens, float scale, int window, Tensor? key_scales=None, Tensor? value_scales=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(workbench, CPU, m) { m.impl("paged_decode_attention", &paged_decode_attention); }
