// nvcuda::wmma for the host emulation (cuda_runtime_api.h): 16 x 16 x 16
// fragments of __half with float accumulators, with the documented matrix
// semantics. Every lane holds the whole tile (the device spreads it over the
// warp in an unspecified layout, which a correct kernel cannot depend on).
// A product is shared out over the lanes through the warp's scratch, and a
// store is made once, by lane 0; both between two warp barriers, so that no
// lane still loading the same memory sees a store early. The API's rules
// are checked, and break the run with a message: pointers 256-bit aligned,
// ldm a multiple of 16 bytes.
#ifndef TANDEM_TESTS_CUDA_EMULATION_MMA_H_
#define TANDEM_TESTS_CUDA_EMULATION_MMA_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cuda_fp16.h"
#include "cuda_runtime.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

// Rows x columns of the tile a fragment holds: A is M x K, B is K x N, C
// is M x N.
template <typename Use, int M, int N, int K>
struct Shape;
template <int M, int N, int K>
struct Shape<matrix_a, M, N, K> {
  static constexpr int kRows = M, kCols = K;
};
template <int M, int N, int K>
struct Shape<matrix_b, M, N, K> {
  static constexpr int kRows = K, kCols = N;
};
template <int M, int N, int K>
struct Shape<accumulator, M, N, K> {
  static constexpr int kRows = M, kCols = N;
};

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int kRows = Shape<Use, M, N, K>::kRows;
  static constexpr int kCols = Shape<Use, M, N, K>::kCols;
  // As the device's: x[num_elements], which a kernel may only change
  // element by element alike (here every lane's x is the whole tile, row by
  // row; on the device a lane's share, in an unspecified order).
  static constexpr int num_elements = kRows * kCols;
  float x[num_elements];  // __half values are exact in float
};

namespace detail {

inline void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "wmma emulation: %s\n", what);
    std::abort();
  }
}

template <typename T>
void CheckArgs(const T* p, unsigned ldm) {
  Check(reinterpret_cast<uintptr_t>(p) % 32 == 0, "pointer not 256-bit aligned");
  Check(ldm * sizeof(T) % 16 == 0, "ldm not a multiple of 16 bytes");
}

inline float ToFloat(__half h) { return __half2float(h); }
inline float ToFloat(float f) { return f; }

template <typename F, typename T>
void Load(F& f, const T* p, unsigned ldm, bool row_major) {
  CheckArgs(p, ldm);
  for (int r = 0; r < F::kRows; ++r) {
    for (int c = 0; c < F::kCols; ++c) {
      f.x[r * F::kCols + c] = ToFloat(row_major ? p[r * ldm + c] : p[r + c * ldm]);
    }
  }
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float value) {
  for (float& v : f.x) v = value;
}

template <typename Use, int M, int N, int K>
void load_matrix_sync(fragment<Use, M, N, K, __half, row_major>& f, const __half* p, unsigned ldm) {
  detail::Load(f, p, ldm, true);
}
template <typename Use, int M, int N, int K>
void load_matrix_sync(fragment<Use, M, N, K, __half, col_major>& f, const __half* p, unsigned ldm) {
  detail::Load(f, p, ldm, false);
}
template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm,
                      layout_t layout) {
  detail::Load(f, p, ldm, layout == mem_row_major);
}

template <int M, int N, int K, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, M, N, K, float>& d,
              const fragment<matrix_a, M, N, K, __half, LayoutA>& a,
              const fragment<matrix_b, M, N, K, __half, LayoutB>& b,
              const fragment<accumulator, M, N, K, float>& c) {
  static_assert(M * N <= cuda_emulation::Warp::kScratch);
  cuda_emulation::Warp& w = cuda_emulation::CurrentWarp();
  for (int e = static_cast<int>(threadIdx.x % 32); e < M * N; e += 32) {
    const int i = e / N;
    const int j = e % N;
    float sum = c.x[i * N + j];
    for (int k = 0; k < K; ++k) sum += a.x[i * K + k] * b.x[k * N + j];
    w.scratch[e] = sum;
  }
  w.sync.arrive_and_wait();
  for (int e = 0; e < M * N; ++e) d.x[e] = w.scratch[e];
  w.sync.arrive_and_wait();
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm,
                       layout_t layout) {
  detail::CheckArgs(p, ldm);
  cuda_emulation::Warp& w = cuda_emulation::CurrentWarp();
  w.sync.arrive_and_wait();
  if (threadIdx.x % 32 == 0) {
    for (int r = 0; r < M; ++r) {
      for (int c = 0; c < N; ++c) {
        (layout == mem_row_major ? p[r * ldm + c] : p[r + c * ldm]) = f.x[r * N + c];
      }
    }
  }
  w.sync.arrive_and_wait();
}

}  // namespace nvcuda::wmma

#endif  // TANDEM_TESTS_CUDA_EMULATION_MMA_H_
