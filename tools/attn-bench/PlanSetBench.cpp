//===- PlanSetBench.cpp - attn-bench's default-vs-tuned plan set ----------===//

#include "PlanSetBench.h"

#include "attn/runtime/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace attn::bench {

namespace {

/// A plan in a table cell: "128x128 s2 c2 ch4 p1" (tiles, stages,
/// consumers, softmax chains, persistent blocks per SM).
std::string planCell(const TileConfig &c) {
  return fmt::format("{}x{} s{} c{} ch{} p{}", c.blockM, c.blockN, c.stages,
                     c.consumerWarpgroups, c.softmaxChains, c.persistentBlocksPerSm);
}

} // namespace

int runPlanSet(const std::vector<tune::PlanSetPoint> &points, const std::string &dataPath,
               const std::map<std::string, TileConfig> *recorded) {
  std::ofstream data;
  if (!dataPath.empty()) {
    data.open(dataPath);
    if (!data)
      throw Error(fmt::format("--plan-set-data: cannot write {}", dataPath));
    data << tune::planSetDataHeader() << std::flush;
  }
  std::printf("| point | B,Sq,Sk | default plan | default ms | tuned plan | tuned ms | "
              "default / tuned speed |\n|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  std::vector<double> fractions;
  for (const tune::PlanSetPoint &point : points) {
    tune::TuneOptions options;
    options.specText = point.specText;
    options.specName = point.name;
    options.shapes = {point.shape};
    options.captures = point.captures;
    if (recorded)
      options.candidates = {recorded->at(point.name)};
    const std::vector<tune::TuneReport> reports = tune::tune(options);
    const tune::TuneReport &report = reports.front();
    const tune::CandidateResult *heuristic = report.heuristicResult();
    const tune::CandidateResult *best = report.best();
    const double fraction = tune::defaultOverTuned(report);
    if (fraction > 0)
      fractions.push_back(fraction);
    auto time = [](const tune::CandidateResult *result) {
      return result && result->status == tune::CandidateStatus::Measured
                 ? fmt::format("{:.3f}", result->milliseconds)
                 : std::string(result ? tune::statusName(result->status) : "none");
    };
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", point.name.c_str(),
                formatTuningShape(point.shape).c_str(), planCell(report.heuristic).c_str(),
                time(heuristic).c_str(), best ? planCell(best->config).c_str() : "none",
                time(best).c_str(), fraction > 0 ? fmt::format("{:.3f}", fraction).c_str() : "-");
    std::fflush(stdout);
    if (data.is_open())
      data << tune::planSetDataRows(point, report) << std::flush;
  }
  if (fractions.empty())
    return 1;
  std::sort(fractions.begin(), fractions.end());
  const size_t n = fractions.size();
  const double median =
      n % 2 ? fractions[n / 2] : (fractions[n / 2 - 1] + fractions[n / 2]) / 2;
  const size_t atLeast97 =
      std::count_if(fractions.begin(), fractions.end(), [](double f) { return f >= 0.97; });
  std::printf("\ndefault / tuned speed over %zu points: median %.3f, least %.3f, %zu at 0.97 or "
              "more\n",
              n, median, fractions.front(), atLeast97);
  return 0;
}

} // namespace attn::bench
