// Gradient summaries in one pass over a CPU tensor's memory.
//
// Why C++: forgeviz summarises every gradient of every backward pass while a cell captures.
// Through torch that is a dozen small ops per gradient (aminmax, sum, norm, histc, tolist), about
// 90 us each in a small training loop: it tripled the loop's time. Here it is one ctypes call and
// one pass over the data. Python (forgeviz/_capture/summary.py) falls back to torch for anything
// this does not handle: other dtypes and devices, and tensors holding NaN or infinity.
#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FV_AVX2 1
#endif

namespace {

constexpr int kMaxDims = 16;
constexpr int64_t kBlock = 512;  // float32 partial sums stay short before they go to double

constexpr int kSets = 8, kMaxBins = 256;  // the histogram's count sets (see summarize) and its most bins

// Adds the bit patterns of n elements at stride, each read as a signed integer of its width and sign-extended, to
// *total (wrapping: unsigned arithmetic).
template <typename T>
void add_patterns(const T* x, int64_t n, int64_t stride, uint64_t* total) {
  using Pattern = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  static_assert(sizeof(Pattern) == sizeof(T));
  Pattern pattern;
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&pattern, x + i * stride, sizeof pattern);
    sum += static_cast<uint64_t>(static_cast<int64_t>(pattern));
  }
  *total += sum;
}

#ifdef FV_AVX2
// Whether this CPU has AVX2 and FMA, asked once (the libraries are built for any x86-64).
bool have_avx2() {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return avx2;
}

// The wrapping 64-bit sum of int32 bit patterns, eight lanes at a time, without widening each pattern (two shuffles
// and two 64-bit adds for every eight, which made the summary's pass half as long again as its stats alone): within
// a block each lane keeps the wrapping 32-bit sum of its patterns, w, and the sum of their top halves (arithmetic
// shift by 16), h. The lane's true sum is h * 2^16 + l, where l, the sum of the low halves, lies in [0, 2^22) for
// up to 64 patterns a lane a block: so l = w - h * 2^16 modulo 2^32, exactly, and only h and l are widened, once a
// block (close_block), into each lane's 64-bit highs and lows; total() adds them up.
struct PatternSums {
  __m256i highs, lows;  // each lane's h and l, widened
  __attribute__((target("avx2"))) PatternSums() : highs(_mm256_setzero_si256()), lows(highs) {}

  static constexpr int64_t kBlockPatterns = 64 * 8;  // at most: l must stay below 2^32 in every lane
  struct Block {
    __m256i w, h;
    __attribute__((target("avx2"))) Block() : w(_mm256_setzero_si256()), h(w) {}
    __attribute__((target("avx2"))) void add(__m256i u, __m256i v) {  // two vectors of eight patterns each
      w = _mm256_add_epi32(w, _mm256_add_epi32(u, v));
      h = _mm256_add_epi32(h, _mm256_add_epi32(_mm256_srai_epi32(u, 16), _mm256_srai_epi32(v, 16)));
    }
  };

  __attribute__((target("avx2"))) void close_block(const Block& a, const Block& b) {
    const __m256i h = _mm256_add_epi32(a.h, b.h);
    const __m256i l = _mm256_sub_epi32(_mm256_add_epi32(a.w, b.w), _mm256_slli_epi32(h, 16));  // (wrapping)
    highs = _mm256_add_epi64(highs, _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(h)),
                                                     _mm256_cvtepi32_epi64(_mm256_extracti128_si256(h, 1))));
    lows = _mm256_add_epi64(lows, _mm256_add_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(l)),
                                                   _mm256_cvtepu32_epi64(_mm256_extracti128_si256(l, 1))));
  }

  __attribute__((target("avx2"))) uint64_t total() const {
    uint64_t h4[4], l4[4];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h4), highs);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(l4), lows);
    return ((h4[0] + h4[1] + h4[2] + h4[3]) << 16) + (l4[0] + l4[1] + l4[2] + l4[3]);
  }
};

// Totals<float>::add_contiguous with AVX2, where the CPU has it (checked at run time; the library
// is built for any x86-64): 32 bytes at a time, min and max with one instruction each, and min
// and max reduced once per row rather than once per block. Gradients are mostly float32 rows, and
// this pass runs over every one of them: twice the speed of the SSE2 loop. With kBits it also adds each element's
// bit pattern, sign-extended, into *bits (fv_bit_sum_tensor's sum), from the same loads: a rank reading the
// gradient the optimizer applies wants both, and one pass reads its memory once. The float arithmetic is the same
// either way, so the statistics are bit for bit those of the pass without. (The patterns: PatternSums, a block of
// kBlock floats at a time.)
template <bool kBits>
__attribute__((target("avx2,fma"))) void add_floats_avx2(const float* x, int64_t n, double& sum, double& sumsq,
                                                        float& lo, float& hi, uint64_t* bits) {
  __m256d sums = _mm256_setzero_pd(), squares = _mm256_setzero_pd();
  __m256 mn0 = _mm256_set1_ps(lo), mn1 = mn0, mx0 = _mm256_set1_ps(hi), mx1 = mx0;
  static_assert(kBlock <= PatternSums::kBlockPatterns);
  PatternSums patterns;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, q0 = s0, q1 = s0, q2 = s0, q3 = s0;
    PatternSums::Block first, second;  // (two, so that their adds do not wait on each other)
    for (int64_t j = i; j < i + kBlock; j += 32) {
      const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + 8), c = _mm256_loadu_ps(x + j + 16),
                   d = _mm256_loadu_ps(x + j + 24);
      s0 = _mm256_add_ps(s0, a);
      s1 = _mm256_add_ps(s1, b);
      s2 = _mm256_add_ps(s2, c);
      s3 = _mm256_add_ps(s3, d);
      q0 = _mm256_fmadd_ps(a, a, q0);
      q1 = _mm256_fmadd_ps(b, b, q1);
      q2 = _mm256_fmadd_ps(c, c, q2);
      q3 = _mm256_fmadd_ps(d, d, q3);
      // NaN may go missing from min and max here, never from the sums: the caller checks those.
      mn0 = _mm256_min_ps(mn0, _mm256_min_ps(a, b));
      mn1 = _mm256_min_ps(mn1, _mm256_min_ps(c, d));
      mx0 = _mm256_max_ps(mx0, _mm256_max_ps(a, b));
      mx1 = _mm256_max_ps(mx1, _mm256_max_ps(c, d));
      if constexpr (kBits) {
        first.add(_mm256_castps_si256(a), _mm256_castps_si256(b));
        second.add(_mm256_castps_si256(c), _mm256_castps_si256(d));
      }
    }
    if constexpr (kBits) patterns.close_block(first, second);
    const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    const __m256 q = _mm256_add_ps(_mm256_add_ps(q0, q1), _mm256_add_ps(q2, q3));
    sums = _mm256_add_pd(sums, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(s)),
                                             _mm256_cvtps_pd(_mm256_extractf128_ps(s, 1))));
    squares = _mm256_add_pd(squares, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(q)),
                                                   _mm256_cvtps_pd(_mm256_extractf128_ps(q, 1))));
  }
  double s4[4], q4[4];
  float mn8[8], mx8[8];
  _mm256_storeu_pd(s4, sums);
  _mm256_storeu_pd(q4, squares);
  _mm256_storeu_ps(mn8, _mm256_min_ps(mn0, mn1));
  _mm256_storeu_ps(mx8, _mm256_max_ps(mx0, mx1));
  sum += (s4[0] + s4[1]) + (s4[2] + s4[3]);
  sumsq += (q4[0] + q4[1]) + (q4[2] + q4[3]);
  for (int l = 0; l < 8; ++l) {
    lo = mn8[l] < lo ? mn8[l] : lo;
    hi = mx8[l] > hi ? mx8[l] : hi;
  }
  for (; i < n; ++i) {
    const float v = x[i];
    sum += v;
    sumsq += static_cast<double>(v) * v;
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  if constexpr (kBits) {
    *bits += patterns.total();
    add_patterns(x + (n - n % kBlock), n % kBlock, 1, bits);  // the elements past the last block
  }
}


// The bins of four floats (see bin_floats_avx2).
__attribute__((target("avx2,fma"))) inline __m128i lanes_bins(__m128 x, __m256d low, __m256d times, __m128i top) {
  const __m128i bins = _mm256_cvttpd_epi32(_mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(x), low), times));
  return _mm_min_epi32(_mm_max_epi32(bins, _mm_setzero_si128()), top);
}

// The bins of at[0], at[gap], at[2 * gap] and at[3 * gap].
__attribute__((target("avx2,fma"))) inline __m128i four_bins(const float* at, int64_t gap, __m256d low, __m256d times,
                                                            __m128i top) {
  return lanes_bins(_mm_set_ps(at[3 * gap], at[2 * gap], at[gap], at[0]), low, times, top);
}

// One count in each of the eight sets, at the bins in a and b. (Read out of the registers: a store
// of them read back lane by lane waits on the store.)
__attribute__((target("avx2,fma"))) inline void count_eight(__m128i a, __m128i b, int64_t (*sets)[kMaxBins]) {
  ++sets[0][_mm_extract_epi32(a, 0)];
  ++sets[1][_mm_extract_epi32(a, 1)];
  ++sets[2][_mm_extract_epi32(a, 2)];
  ++sets[3][_mm_extract_epi32(a, 3)];
  ++sets[4][_mm_extract_epi32(b, 0)];
  ++sets[5][_mm_extract_epi32(b, 1)];
  ++sets[6][_mm_extract_epi32(b, 2)];
  ++sets[7][_mm_extract_epi32(b, 3)];
}

// Bins p[k * stride] for k = first, first + step, ... below n into the eight count sets, as
// summarize's scalar loop does, eight samples at a time: their bin numbers are worked out together
// in double, with the same subtraction and multiplication, so each lands where the scalar loop puts
// it (the values lie between lo and hi, so the bin numbers fit an int32). The bins took as long as
// the stats pass over a whole gradient. Returns where the next sample would be.
__attribute__((target("avx2,fma"))) int64_t bin_floats_avx2(const float* p, int64_t first, int64_t n, int64_t stride,
                                                           int64_t step, double lo, double scale, int last,
                                                           int64_t (*sets)[kMaxBins]) {
  const __m256d low = _mm256_set1_pd(lo), times = _mm256_set1_pd(scale);
  const __m128i top = _mm_set1_epi32(last);
  const int64_t gap = step * stride;
  int64_t k = first;
  if (stride == 1 && step <= 2) {
    // Every element or every second one of a row: eight at a time with whole loads (the order in
    // which samples are counted does not matter), reading nothing past the row's last element.
    for (; k + 8 * step <= n; k += 8 * step) {
      const float* at = p + k;
      const __m256 a = _mm256_loadu_ps(at);
      const __m256 x = step == 1 ? a : _mm256_shuffle_ps(a, _mm256_loadu_ps(at + 8), 0x88);  // the even lanes
      count_eight(lanes_bins(_mm256_castps256_ps128(x), low, times, top),
                  lanes_bins(_mm256_extractf128_ps(x, 1), low, times, top), sets);
    }
  }
  for (; k + 7 * step < n; k += 8 * step) {
    const float* at = p + k * stride;
    count_eight(four_bins(at, gap, low, times, top), four_bins(at + 4 * gap, gap, low, times, top), sets);
  }
  for (; k < n; k += step) {
    const int64_t bin = static_cast<int64_t>((static_cast<double>(p[k * stride]) - lo) * scale);
    ++sets[0][bin < 0 ? 0 : (bin > last ? last : bin)];
  }
  return k;
}

// The wrapping 64-bit sum of n int32s (a float32 row's bit patterns), each sign-extended: 16 at a time, in
// PatternSums' blocks.
__attribute__((target("avx2"))) uint64_t add_int32s_avx2(const int32_t* x, int64_t n) {
  PatternSums patterns;
  int64_t i = 0;
  while (i + 16 <= n) {
    PatternSums::Block first, second;
    const int64_t end = std::min(n - n % 16, i + PatternSums::kBlockPatterns);
    for (; i + 16 <= end; i += 16) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8));
      (i & 16 ? second : first).add(u, v);
    }
    patterns.close_block(first, second);
  }
  uint64_t total = patterns.total();
  add_patterns(x + i, n - i, 1, &total);  // (the last few)
  return total;
}
#endif

// Merges dimensions that step through memory as one (all of them, for a contiguous tensor), so rows
// are as long as they can be: a row is where the vectorised loop runs. Returns the new ndim (>= 1).
int merge_dims(int ndim, const int64_t* given_sizes, const int64_t* given_strides, int64_t* sizes, int64_t* strides) {
  int merged = 0;
  sizes[0] = given_sizes[0];
  strides[0] = given_strides[0];
  for (int d = 1; d < ndim; ++d) {
    if (strides[merged] == given_strides[d] * given_sizes[d]) {
      sizes[merged] *= given_sizes[d];
      strides[merged] = given_strides[d];
    } else {
      ++merged;
      sizes[merged] = given_sizes[d];
      strides[merged] = given_strides[d];
    }
  }
  return merged + 1;
}

// Visits every element of a strided tensor in row-major (reshape(-1)) order, calling
// run(pointer, count, stride) once per innermost row.
template <typename T, typename Run>
void for_each_row(const T* data, int ndim, const int64_t* given_sizes, const int64_t* given_strides, Run run) {
  if (ndim == 0) {
    run(data, 1, 1);
    return;
  }
  int64_t sizes[kMaxDims], strides[kMaxDims];
  ndim = merge_dims(ndim, given_sizes, given_strides, sizes, strides);
  int64_t index[kMaxDims] = {0};
  const int inner = ndim - 1;
  for (;;) {
    const T* row = data;
    for (int d = 0; d < inner; ++d) row += index[d] * strides[d];
    run(row, sizes[inner], strides[inner]);
    int d = inner - 1;
    for (; d >= 0; --d) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

template <typename T>
struct Totals {
  double sum = 0, sumsq = 0;
  T lo = std::numeric_limits<T>::infinity(), hi = -std::numeric_limits<T>::infinity();
  bool finite = true;
  uint64_t* bits = nullptr;  // where the elements' bit patterns are summed too (fv_summarize_bit_sum_tensor), if at all

  void add(const T* x, int64_t n, int64_t stride) {
    if (stride == 1) {
      add_contiguous(x, n);
      return;
    }
    for (int64_t i = 0; i < n; ++i) one(x[i * stride]);
    if (bits != nullptr) add_patterns(x, n, stride, bits);
  }

  void one(T v) {
    sum += v;
    sumsq += static_cast<double>(v) * v;
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }

  // 16 bytes at a time (SSE2, on every x86-64) with GCC's vector extensions, in kChains
  // independent chains so one add need not wait for the last: the compiler does neither by
  // itself, since float sums are not associative.
  typedef T Vec __attribute__((vector_size(16)));
  static constexpr int kLanes = 16 / sizeof(T);
  static constexpr int kChains = 4;

  void add_contiguous(const T* x, int64_t n) {
#ifdef FV_AVX2
    if constexpr (std::is_same_v<T, float>) {
      if (have_avx2()) {
        if (bits != nullptr)
          add_floats_avx2<true>(x, n, sum, sumsq, lo, hi, bits);
        else
          add_floats_avx2<false>(x, n, sum, sumsq, lo, hi, nullptr);
        return;
      }
    }
#endif
    int64_t i = 0;
    for (; i + kBlock <= n; i += kBlock) {
      Vec s[kChains] = {}, q[kChains] = {}, mn[kChains], mx[kChains];
      for (int c = 0; c < kChains; ++c) {
        std::memcpy(&mn[c], x + i, sizeof(Vec));
        mx[c] = mn[c];
      }
      for (int64_t j = 0; j < kBlock; j += kLanes * kChains)
#pragma GCC unroll 4
        for (int c = 0; c < kChains; ++c) {
          Vec v;
          std::memcpy(&v, x + i + j + c * kLanes, sizeof(Vec));  // an unaligned load
          s[c] += v;
          q[c] += v * v;
          mn[c] = v < mn[c] ? v : mn[c];
          mx[c] = v > mx[c] ? v : mx[c];
        }
      for (int c = 0; c < kChains; ++c)
        for (int l = 0; l < kLanes; ++l) {
          sum += s[c][l];
          sumsq += q[c][l];
          lo = mn[c][l] < lo ? mn[c][l] : lo;
          hi = mx[c][l] > hi ? mx[c][l] : hi;
        }
    }
    for (; i < n; ++i) one(x[i]);
    if (bits != nullptr) add_patterns(x, n, 1, bits);
  }
};

template <typename T>
int summarize(const T* data, int ndim, const int64_t* sizes, const int64_t* strides, int64_t sample_step,
              int bins, double* stats, int64_t* counts, double* values, int64_t values_cap,
              uint64_t* bits = nullptr) {
  Totals<T> totals;
  totals.bits = bits;
  int64_t numel = 1;
  for (int d = 0; d < ndim; ++d) numel *= sizes[d];
  // Stats do not depend on order: walk memory in its own order (a transposed gradient too), so
  // rows are contiguous wherever the tensor is dense.
  int64_t by_stride[kMaxDims], memory_sizes[kMaxDims], memory_strides[kMaxDims];
  // Largest stride first, ties kept in order: an insertion sort of at most 16 (std::stable_sort takes a
  // buffer from malloc at every call: a call per gradient, on the training thread and the reader's)
  for (int d = 0; d < ndim; ++d) {
    int at = d;
    for (; at > 0 && strides[by_stride[at - 1]] < strides[d]; --at) by_stride[at] = by_stride[at - 1];
    by_stride[at] = d;
  }
  for (int d = 0; d < ndim; ++d) {
    memory_sizes[d] = sizes[by_stride[d]];
    memory_strides[d] = strides[by_stride[d]];
  }
  for_each_row(data, ndim, memory_sizes, memory_strides,
               [&](const T* row, int64_t n, int64_t stride) { totals.add(row, n, stride); });
  // NaN fails every comparison and infinity overflows the sums: both end here, and the caller
  // counts them with torch (rare, and it must then exclude them from min and max).
  if (!std::isfinite(totals.sum) || !std::isfinite(totals.sumsq) || !std::isfinite(static_cast<double>(totals.lo)) ||
      !std::isfinite(static_cast<double>(totals.hi)))
    return 1;
  stats[0] = totals.lo;
  stats[1] = totals.hi;
  stats[2] = totals.sum;
  stats[3] = std::sqrt(totals.sumsq);
  if (numel <= values_cap) {
    int64_t k = 0;
    for_each_row(data, ndim, sizes, strides, [&](const T* row, int64_t n, int64_t stride) {
      for (int64_t i = 0; i < n; ++i) values[k++] = row[i * stride];
    });
    return 0;
  }
  if (bins <= 0) return 0;
  // Every sample_step-th element in reshape(-1) order, like source[::step] in summary.py.
  const double lo = totals.lo, hi = totals.hi > totals.lo ? static_cast<double>(totals.hi) : lo + 1;
  const double scale = bins / (hi - lo);
  // Counted in several sets on the stack (four here, eight in bin_floats_avx2), by turns, then summed: consecutive samples often fall in one
  // bin, and one set would make each increment wait for the last; and counts written through the
  // caller's pointer could alias the loop's own variables, which the compiler would then reload
  // from memory after every increment (the histogram took longer than the stats pass).
  if (bins > kMaxBins) return -1;
  int64_t sets[kSets][kMaxBins];
  for (auto& set : sets) std::fill_n(set, bins, 0);  // only the bins in use: the rest is never read
  const int64_t last = bins - 1;
  // Bins p[k * stride] for k = first, first + step, ... below n. Returns where the next would be.
  auto count = [&sets, last, lo, scale](const T* p, int64_t first, int64_t n, int64_t stride, int64_t step) {
#ifdef FV_AVX2
    if constexpr (std::is_same_v<T, float>) {
      if (have_avx2()) return bin_floats_avx2(p, first, n, stride, step, lo, scale, static_cast<int>(last), sets);
    }
#endif
    auto bin = [p, stride, last, lo, scale](int64_t k) {
      const int64_t b = static_cast<int64_t>((static_cast<double>(p[k * stride]) - lo) * scale);
      return b < 0 ? 0 : (b > last ? last : b);  // the top edge belongs to the last bin
    };
    int64_t k = first;
    for (; k + 3 * step < n; k += 4 * step) {
      ++sets[0][bin(k)];
      ++sets[1][bin(k + step)];
      ++sets[2][bin(k + 2 * step)];
      ++sets[3][bin(k + 3 * step)];
    }
    for (; k < n; k += step) ++sets[0][bin(k)];
    return k;
  };
  int64_t merged_sizes[kMaxDims], merged_strides[kMaxDims];
  const int merged = ndim == 0 ? 0 : merge_dims(ndim, sizes, strides, merged_sizes, merged_strides);
  if (merged == 2 && merged_sizes[1] % sample_step == 0 && std::abs(merged_strides[0]) < std::abs(merged_strides[1])) {
    // A transposed matrix: every row is sampled at the same columns, so count the sampled columns,
    // each one along memory, rather than the rows, each a stride apart for every sample.
    for (int64_t k = 0; k < merged_sizes[1]; k += sample_step)
      count(data + k * merged_strides[1], 0, merged_sizes[0], merged_strides[0], 1);
  } else {
    int64_t position = 0, next = 0;  // reshape(-1) index of the row's start, and of the next sample
    for_each_row(data, ndim, sizes, strides, [&](const T* row, int64_t n, int64_t stride) {
      next = position + count(row, next - position, n, stride, sample_step);
      position += n;
    });
  }
  for (int b = 0; b < bins; ++b) {
    int64_t total = 0;
    for (int j = 0; j < kSets; ++j) total += sets[j][b];
    counts[b] = total;
  }
  return 0;
}

// The memory of a tensor these functions read themselves, and its dtype (0: float32, 1: float64); nullptr for
// any other: not a float CPU tensor with memory, a negated or Python-dispatched one, an empty one, one of
// more than kMaxDims dims. (Sizes or memory it cannot read, symbolic or lazy, throw: the callers catch.)
const void* readable(const c10::TensorImpl* impl, int& dtype) {
  if (impl == nullptr || impl->device_type() != c10::DeviceType::CPU || impl->layout() != c10::kStrided ||
      impl->is_python_dispatch() || impl->key_set().has(c10::DispatchKey::Functionalize) || impl->is_neg() ||
      !impl->has_storage())
    return nullptr;
  const auto type = impl->dtype();
  dtype = type == caffe2::TypeMeta::Make<float>() ? 0 : type == caffe2::TypeMeta::Make<double>() ? 1 : -1;
  if (dtype < 0 || impl->dim() > kMaxDims || impl->numel() == 0) return nullptr;
  return impl->data();
}

}  // namespace

extern "C" {

// Stats of a float32 (dtype 0) or float64 (dtype 1) CPU tensor: writes min, max, sum and L2 norm
// to stats; its values to values when numel <= values_cap, else a histogram of every
// sample_step-th element into counts (bins of equal width from min to max). Returns 0, or 1 when
// the tensor holds NaN or infinity (nothing useful is written then), or -1 for what it cannot read.
int fv_summarize(const void* data, int dtype, int ndim, const int64_t* sizes, const int64_t* strides,
                 int64_t sample_step, int bins, double* stats, int64_t* counts, double* values,
                 int64_t values_cap) {
  if (ndim < 0 || ndim > kMaxDims || sample_step < 1) return -1;
  for (int d = 0; d < ndim; ++d)
    if (sizes[d] <= 0) return -1;  // empty tensors are summarised without looking at data
  if (dtype == 0)
    return summarize(static_cast<const float*>(data), ndim, sizes, strides, sample_step, bins, stats, counts, values,
                     values_cap);
  if (dtype == 1)
    return summarize(static_cast<const double*>(data), ndim, sizes, strides, sample_step, bins, stats, counts, values,
                     values_cap);
  return -1;
}

// fv_summarize for the tensor whose TensorImpl is at `impl` (torch.Tensor._cdata), its histogram a
// sample of about `sample` elements: its sizes, strides, dtype and memory are read here. A summary is
// taken in every backward hook, and the eleven arguments of fv_summarize cost Python more to pass
// than a small gradient costs to summarise. Writes min, max, sum and norm to out[0..3] and the values
// after them. Returns what fv_summarize returns; -1 also for a tensor it does not read itself (not a
// float CPU tensor with memory, a negated or Python-dispatched one, an empty one, one of more than
// 16 dims).
int fv_summarize_tensor(const void* impl_address, int sample, int bins, int values_cap, double* out,
                        int64_t* counts) {
  try {
    const auto* impl = static_cast<const c10::TensorImpl*>(impl_address);
    int dtype;
    const void* data = readable(impl, dtype);
    if (data == nullptr) return -1;
    const int64_t ndim = impl->dim(), numel = impl->numel();
    const int64_t step = std::max<int64_t>(1, numel / std::max(1, sample));
    return fv_summarize(data, dtype, static_cast<int>(ndim), impl->sizes().data(), impl->strides().data(), step,
                        bins, out, counts, out + 4, values_cap);
  } catch (...) {  // sizes or memory it cannot read (symbolic, lazy): Python's torch path reads those
    return -1;
  }
}

// A gradient's fingerprint (recording.fold_bit_sum's total): the wrapping 64-bit sum of the bit patterns of a
// float32 or float64 CPU tensor's elements, each read as a signed integer of its width, as torch's
// t.view(torch.int32).sum(dtype=torch.int64) (int64 for float64). Integer sums are exact in any order: equal
// tensors, bit for bit, give equal totals however they lie in memory, and one changed element changes it.
// Written to *total; returns 0, or -1 for a tensor fv_summarize_tensor would not read either.
int fv_bit_sum_tensor(const void* impl_address, uint64_t* total) {
  try {
    const auto* impl = static_cast<const c10::TensorImpl*>(impl_address);
    int dtype;
    const void* data = readable(impl, dtype);
    if (data == nullptr) return -1;
    // each element's pattern sign-extended to 64 bits and added in unsigned arithmetic, whose wrapping is defined
    uint64_t sum = 0;
    auto add = [&sum](const auto* row, int64_t n, int64_t stride) {
#ifdef FV_AVX2
      if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<decltype(row)>>, float>) {
        if (stride == 1 && have_avx2()) {
          sum += add_int32s_avx2(reinterpret_cast<const int32_t*>(row), n);
          return;
        }
      }
#endif
      add_patterns(row, n, stride, &sum);
    };
    const int ndim = static_cast<int>(impl->dim());
    if (dtype == 0)
      for_each_row(static_cast<const float*>(data), ndim, impl->sizes().data(), impl->strides().data(), add);
    else
      for_each_row(static_cast<const double*>(data), ndim, impl->sizes().data(), impl->strides().data(), add);
    *total = sum;
    return 0;
  } catch (...) {
    return -1;
  }
}

// fv_summarize_tensor's min, max, sum and norm (no sample, no values) and fv_bit_sum_tensor's total, of the same
// tensor, in one pass over its memory (where the AVX2 loop runs: float32 rows; else the patterns are added row by
// row, the row still in cache): what a rank reads of each gradient the optimizer applies (grad_reader.cpp). The
// statistics are bit for bit fv_summarize_tensor's. Returns 0 with both written, 1 for NaN or infinity (neither
// is), or -1 for a tensor those would not read.
int fv_summarize_bit_sum_tensor(const void* impl_address, double* stats, uint64_t* total) {
  try {
    const auto* impl = static_cast<const c10::TensorImpl*>(impl_address);
    int dtype;
    const void* data = readable(impl, dtype);
    if (data == nullptr) return -1;
    const int ndim = static_cast<int>(impl->dim());
    const int64_t numel = impl->numel();
    uint64_t sum = 0;
    const int done =
        dtype == 0 ? summarize(static_cast<const float*>(data), ndim, impl->sizes().data(), impl->strides().data(),
                               numel, 0, stats, nullptr, nullptr, 0, &sum)
                   : summarize(static_cast<const double*>(data), ndim, impl->sizes().data(), impl->strides().data(),
                               numel, 0, stats, nullptr, nullptr, 0, &sum);
    if (done == 0) *total = sum;
    return done;
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
