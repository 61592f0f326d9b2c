//===- PlanSetBench.h - attn-bench's default-vs-tuned plan set --*- C++ -*-===//
#ifndef ATTN_BENCH_PLANSETBENCH_H
#define ATTN_BENCH_PLANSETBENCH_H

#include "PlanSet.h"

#include <string>
#include <vector>

namespace attn::bench {

/// Tunes every point (attn-tune's loop: the heuristic and every legal plan,
/// checked against the reference and timed) and prints the default plan
/// beside the tuned one, their times and the default's speed as a fraction
/// of the tuned one's, then the median and the least of those fractions.
/// With `dataPath`, writes every measured candidate there as it goes
/// (planSetDataRows). With `recorded` (readRecordedTunedPlans for these
/// points), each point
/// times only its default against the plan its recorded candidates put
/// first, checked and in the same interleaved rounds: seconds a point where
/// the whole search takes a minute. Records nothing in the tuning database.
/// Needs an sm_90 GPU.
int runPlanSet(const std::vector<tune::PlanSetPoint> &points, const std::string &dataPath,
               const std::map<std::string, TileConfig> *recorded = nullptr);

} // namespace attn::bench

#endif // ATTN_BENCH_PLANSETBENCH_H
