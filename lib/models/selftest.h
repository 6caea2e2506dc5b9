// The Selftest family: benchmarks that exist to test the tools around bench
// (a step that succeeds quickly, one that is slow, one that crashes the
// process). Registered only when the environment sets LTB_SELFTEST=1.
#pragma once

#include "family/family.h"

namespace ltb {

// Selftest/ok/cpu/step/fp32, Selftest/slow/cpu/step/fp32 (0.2 s a step),
// Selftest/abort/cpu/step/fp32 (calls std::abort in its first step),
// Selftest/spin/cpu/step/fp32 (2 ms of busy waiting times the factor in
// LTB_SELFTEST_SLOWDOWN), Selftest/kill/cpu/step/fp32 (SIGKILLs itself),
// and two data-parallel ones: Selftest/together/cpu/step/fp32/ranks:N (a
// sum over the ranks a step) and Selftest/rank1_fails (rank 1 fails at its
// fifth step). With LTB_SELFTEST_MARKS=DIR, each rank that builds a
// workload leaves an empty file DIR/KIND.rankN.
Family SelftestFamily();

}  // namespace ltb
