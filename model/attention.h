// Attention of a CPU decode step: the scores of a query head against every cached key,
// their softmax, and the softmax-weighted sum of the cached values.
//
// attend_head is the portable version, one head at a time. attend_group_avx2 (AVX2+FMA,
// heads a multiple of 8 long) takes up to kGroupHeads query heads that share one KV head
// (grouped-query attention), so each cached key and value is read once for all of them,
// over one range of positions; it leaves each head's result unnormalized with the
// softmax's running max and sum, and merge_partials combines the ranges. Splitting the
// positions gives the threads work to share when a model has fewer KV heads than the
// machine has threads to keep busy.
#pragma once

#include <cstddef>

namespace qmv {

struct HeadAttention {
  const float* q = nullptr;       // head_dim values
  const float* keys = nullptr;    // position t's key at keys + t * stride
  const float* values = nullptr;  // position t's value at values + t * stride
  std::size_t stride = 0;         // floats from one position's key (or value) to the next
  int positions = 0;              // at least 1
  int head_dim = 0;
  float scale = 1;           // applied to each score before the softmax
  float* scores = nullptr;   // `positions` floats of scratch
  float* out = nullptr;      // head_dim values
};

void attend_head(const HeadAttention& a);

inline constexpr int kGroupHeads = 4;

// One range of positions [first, end) of up to kGroupHeads query heads on one KV head.
struct GroupAttention {
  const float* q = nullptr;  // `heads` query heads, head_dim values each, back to back
  int heads = 1;
  const float* keys = nullptr;  // as HeadAttention
  const float* values = nullptr;
  std::size_t stride = 0;
  int first = 0, end = 0;  // first < end
  int head_dim = 0;
  float scale = 1;
  float* scores = nullptr;  // head h's score of position t at scores[h * scores_stride + t]
  std::size_t scores_stride = 0;
  // Per head h, over the range: out[h * head_dim + i] = sum of exp(s_t - max[h]) * v_t[i],
  // sum[h] = sum of exp(s_t - max[h]), max[h] = the largest score s_t.
  float* out = nullptr;
  float* max = nullptr;
  float* sum = nullptr;
};

// AVX2+FMA: call only where the CPU has both and head_dim % 8 == 0.
void attend_group_avx2(const GroupAttention& a);

// One head's output from its partial results over `ranges` ranges, as attend_group_avx2
// leaves them: range r's at out + r * out_stride, max[r * stat_stride], sum[r * stat_stride].
void merge_partials(const float* out, std::size_t out_stride, const float* max, const float* sum,
                    std::size_t stat_stride, int ranges, int head_dim, float* result);

// s[t] = exp(s[t] - max_s) for t < n, 8 lanes at a time (AVX2); returns their sum.
float exp_shifted_avx2(float* s, int n, float max_s);

}  // namespace qmv
