// What the machine gives a benchmark's thread at the time, measured with
// nothing else of the benchmark running, so that a run's figures come with
// the state they were taken in (tandem-fleet-sim prints it before its run
// and after its measured requests).
//
// Interruptions: gaps of over 1 us between back-to-back reads of the steady
// clock, which reads in about 20 ns. On a VM most are the host's, which the
// guest does not count as stolen: they count as the thread's CPU time, so
// they land inside any CPU time the benchmark reads. Memory: a read that
// waits for the one before, at random over a buffer allocated as the block
// index's tables are (gateway/routing/huge_pages.h), as a probe's loads
// follow one another. Clock: the rate at which the core runs a chain of
// dependent register adds (one cycle each on every x86-64 core), which a
// VM's host moves with its own load and turbo. All three move with a VM's
// other tenants (docs/benchmarks.md).
#ifndef TANDEM_BENCH_MACHINE_STATE_H_
#define TANDEM_BENCH_MACHINE_STATE_H_

#include <cstdint>

namespace tandem::bench {

struct Machine {
  double interruptions_per_second = 0;
  double interruption_median_us = 0;
  double interrupted_fraction = 0;  // of the thread's time
  double dependent_read_ns = 0;
  double core_ghz = 0;  // 0: not measured (or not x86-64)
};

// Spins on the clock for `scan_seconds` (0: interruptions and the core's
// clock not measured), times the add chain, then reads at random over
// `probe_bytes` (0: memory not measured).
Machine MeasureMachine(double scan_seconds, int64_t probe_bytes);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_MACHINE_STATE_H_
