#include "bench/machine_state.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "gateway/routing/huge_pages.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The machine's interruptions of this thread, spinning on the clock for
// `seconds` (Machine).
void ScanInterruptions(double seconds, Machine& m) {
  if (seconds <= 0) return;
  constexpr Clock::duration kGap = std::chrono::microseconds(1);
  std::vector<double> gaps_us;
  Clock::duration lost{};
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  Clock::time_point last = start;
  for (Clock::time_point now = start; now < end; last = now) {
    now = Clock::now();
    if (now - last > kGap) {
      lost += now - last;
      gaps_us.push_back(std::chrono::duration<double, std::micro>(now - last).count());
    }
  }
  const double spun = std::chrono::duration<double>(last - start).count();
  std::sort(gaps_us.begin(), gaps_us.end());
  m.interruptions_per_second = static_cast<double>(gaps_us.size()) / spun;
  m.interruption_median_us = gaps_us.empty() ? 0 : gaps_us[gaps_us.size() / 2];
  m.interrupted_fraction = std::chrono::duration<double>(lost).count() / spun;
}

// The core's clock (Machine::core_ghz): windows of kAdds dependent adds,
// register to register (an add of an immediate may be done at rename on
// newer cores, at no cycle), timed by the steady clock; the median
// window's rate, so that the host's interruptions, which land in a few
// windows, do not lower it.
void MeasureClock(Machine& m) {
#if defined(__x86_64__)
  constexpr int kWindows = 401;
  constexpr uint64_t kAdds = 100 * 100;  // per window: 100 blocks of 100
  std::vector<double> ghz;
  ghz.reserve(kWindows);
  uint64_t x = 0;
  const uint64_t one = 1;
  for (int w = 0; w < kWindows; ++w) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < 100; ++i) {
      asm volatile(".rept 100\n\taddq %1, %0\n\t.endr" : "+r"(x) : "r"(one));
    }
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    ghz.push_back(static_cast<double>(kAdds) / ns);
  }
  std::nth_element(ghz.begin(), ghz.begin() + kWindows / 2, ghz.end());
  m.core_ghz = ghz[kWindows / 2];
  if (x != kWindows * kAdds) std::abort();  // the chain ran whole
#else
  (void)m;
#endif
}

// A dependent read's time over `bytes` (Machine): each 64-byte line holds
// the index of the next one read, in the full-period order of a linear
// congruential generator over the power-of-two line count, so no
// prefetcher can guess the next and each read waits for the one before.
void ProbeMemory(int64_t bytes, Machine& m) {
  const size_t lines = std::bit_floor(static_cast<size_t>(bytes) / 64);
  if (lines < 2) return;
  gateway::FreeFunction free_lines = nullptr;
  auto* words = static_cast<uint64_t*>(gateway::AllocateZeroed(lines * 64, &free_lines));
  // Full period modulo a power of two: an odd increment, a multiplier 1
  // modulo 4 (Knuth's MMIX constants).
  for (size_t i = 0; i < lines; ++i) {
    words[8 * i] = (i * 6364136223846793005ull + 1442695040888963407ull) & (lines - 1);
  }
  const int64_t reads = static_cast<int64_t>(std::min<size_t>(lines, 2'000'000));
  uint64_t at = 0;
  const Clock::time_point t0 = Clock::now();
  for (int64_t k = 0; k < reads; ++k) at = words[8 * at];
  m.dependent_read_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() /
                        static_cast<double>(reads);
  // The chase's end is used, so that the reads are kept.
  if (at >= lines) std::abort();
  free_lines(words, lines * 64);
}

}  // namespace

Machine MeasureMachine(double scan_seconds, int64_t probe_bytes) {
  Machine m;
  ScanInterruptions(scan_seconds, m);
  if (scan_seconds > 0) MeasureClock(m);
  if (probe_bytes > 0) ProbeMemory(probe_bytes, m);
  return m;
}

}  // namespace tandem::bench
