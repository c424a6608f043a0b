// Decode attention that reads the paged KV cache in place, on the CPU.
//
// One work item per (sequence, KV head): the item reads each visible key once, scoring it against
// all of that KV head's query heads (grouped-query attention), then each visible value once,
// weighting it by the softmax of the scores. Nothing is gathered or padded: a sequence reads
// exactly its own blocks, each position once, in the cache's dtype (bfloat16 or float32),
// converted to float32 a row at a time; scores and sums are float32. Long contexts are split
// into chunks so that one sequence keeps every core busy.
//
// Shapes (the same contract as kernels/paged_attention.py's paged_decode_attention):
//   query         [num_seqs, num_heads, head_dim]         float32 or bfloat16
//   key_cache     [num_blocks, block_size, kv_heads, head_dim]  float32 or bfloat16
//   value_cache   like key_cache
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
#include <vector>

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

inline float to_float(float x) { return x; }
inline float to_float(c10::BFloat16 x) { return static_cast<float>(x); }

// A long context is split into chunks of this many positions, each its own work item, merged at
// the end (as flash-decoding does): one sequence's few KV heads would otherwise leave cores idle.
constexpr int64_t kChunk = 1024;

// One chunk's softmax state per query head, `head_dim + 2` floats: the maximum score, the sum of
// exponentials and the weighted sum of values, both relative to that maximum.
inline float* partial_of(float* partials, int64_t item, int64_t g, int64_t group, int64_t head_dim) {
  return partials + (item * group + g) * (head_dim + 2);
}

template <typename cache_t>
void attend_chunk(const float (&q)[kMaxGroup][kMaxHeadDim], const cache_t* key_cache, const cache_t* value_cache,
                  const int64_t* table, int64_t from, int64_t to, int64_t group, int64_t head_dim,
                  int64_t block_size, int64_t token_stride, int64_t block_stride, int64_t head_offset,
                  std::vector<float>& scores, float* partials, int64_t item) {
  const int64_t count = to - from;
  scores.resize(group * count);
  float row[kMaxHeadDim];
  float maxima[kMaxGroup];
  std::fill(maxima, maxima + group, -std::numeric_limits<float>::infinity());
  for (int64_t p = from; p < to; ++p) {
    load_row(key_cache + table[p / block_size] * block_stride + (p % block_size) * token_stride + head_offset, row,
             head_dim);
    for (int64_t g = 0; g < group; ++g) {
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < head_dim; ++d) dot += q[g][d] * row[d];
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
    load_row(value_cache + table[p / block_size] * block_stride + (p % block_size) * token_stride + head_offset,
             row, head_dim);
    for (int64_t g = 0; g < group; ++g) {
      const float weight = scores[g * count + (p - from)];
      float* target = partial_of(partials, item, g, group, head_dim) + 2;
#pragma omp simd
      for (int64_t d = 0; d < head_dim; ++d) target[d] += weight * row[d];
    }
  }
}

template <typename cache_t, typename query_t>
void attend(const query_t* query, const cache_t* key_cache, const cache_t* value_cache,
            const int64_t* block_tables, const int64_t* context_lens, query_t* out, int64_t num_seqs,
            int64_t num_heads, int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t max_blocks,
            double scale, int64_t window) {
  const int64_t group = num_heads / kv_heads;
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
    std::vector<float> scores;
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
      attend_chunk(q, key_cache, value_cache, block_tables + seq * max_blocks, from, to, group, head_dim,
                   block_size, token_stride, block_stride, kv_head * head_dim, scores, partials.get(), item);
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
                    const at::Tensor& block_tables, const at::Tensor& context_lens, at::Tensor& out, double scale,
                    int64_t window) {
  auto run = [&](auto cache_type_tag) {
    using cache_t = decltype(cache_type_tag);
    attend<cache_t, query_t>(query.data_ptr<query_t>(), key_cache.data_ptr<cache_t>(), value_cache.data_ptr<cache_t>(),
                             block_tables.data_ptr<int64_t>(), context_lens.data_ptr<int64_t>(),
                             out.data_ptr<query_t>(), query.size(0), query.size(1), key_cache.size(2), query.size(2),
                             key_cache.size(1), block_tables.size(1), scale, window);
  };
  if (key_cache.scalar_type() == at::kBFloat16) {
    run(c10::BFloat16());
  } else {
    run(float());
  }
}

at::Tensor paged_decode_attention(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                                  const at::Tensor& block_tables, const at::Tensor& context_lens, double scale,
                                  int64_t window) {
  TORCH_CHECK(query.dim() == 3 && key_cache.dim() == 4, "query [seqs, heads, dim], cache [blocks, size, kv_heads, dim]");
  TORCH_CHECK(key_cache.scalar_type() == value_cache.scalar_type(), "key and value caches differ in dtype");
  TORCH_CHECK(key_cache.scalar_type() == at::kBFloat16 || key_cache.scalar_type() == at::kFloat,
              "cache dtype: bfloat16 or float32");
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
  at::Tensor out = at::empty_like(q);
  if (q.scalar_type() == at::kBFloat16) {
    dispatch_cache<c10::BFloat16>(q, key_cache, value_cache, tables, lengths, out, scale, window);
  } else {
    dispatch_cache<float>(q, key_cache, value_cache, tables, lengths, out, scale, window);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(workbench, m) {
  m.def(
      "paged_decode_attention(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, "
      "Tensor context_lens, float scale, int window) -> Tensor");
}

TORCH_LIBRARY_IMPL(workbench, CPU, m) { m.impl("paged_decode_attention", &paged_decode_attention); }
