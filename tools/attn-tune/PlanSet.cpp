//===- PlanSet.cpp - Spec x shape points for default-vs-tuned runs --------===//

#include "PlanSet.h"

#include "attn/runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

namespace attn::tune {

std::vector<PlanSetPoint> readPlanSet(const std::string &path) {
  std::ifstream file(path);
  if (!file)
    throw Error(fmt::format("{}: cannot read the plan set", path));
  const std::filesystem::path directory = std::filesystem::path(path).parent_path();
  std::vector<PlanSetPoint> points;
  std::set<std::string> names;
  int lineNumber = 0;
  for (std::string line; std::getline(file, line);) {
    ++lineNumber;
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    PlanSetPoint point;
    std::string shapeText;
    if (!(fields >> point.name))
      continue;
    auto fail = [&](const std::string &why) {
      return Error(fmt::format("{}:{}: {}", path, lineNumber, why));
    };
    if (!(fields >> point.specPath >> shapeText))
      throw fail(fmt::format("point '{}' needs a spec and a shape B,Sq,Sk", point.name));
    if (!names.insert(point.name).second)
      throw fail(fmt::format("point '{}' is named twice", point.name));
    if (std::optional<std::string> error = parseTuningShape(shapeText, point.shape))
      throw fail(fmt::format("point '{}': shape '{}': {}", point.name, shapeText, *error));
    for (std::string capture; fields >> capture;) {
      if (capture.find('=') == std::string::npos)
        throw fail(fmt::format("point '{}': capture '{}' is not NAME=GENERATOR", point.name,
                               capture));
      point.captures.push_back(capture);
    }
    point.specPath = (directory / point.specPath).lexically_normal().string();
    std::ifstream spec(point.specPath);
    if (!spec)
      throw fail(fmt::format("point '{}': cannot read {}", point.name, point.specPath));
    point.specText.assign(std::istreambuf_iterator<char>(spec), std::istreambuf_iterator<char>());
    point.line = lineNumber;
    points.push_back(std::move(point));
  }
  if (points.empty())
    throw Error(fmt::format("{}: the plan set has no point", path));
  return points;
}

std::vector<PlanSetPoint> selectPlanSetPoints(const std::vector<PlanSetPoint> &points,
                                              const std::string &names) {
  if (names.empty())
    return points;
  std::vector<PlanSetPoint> selected;
  std::istringstream list(names);
  for (std::string name; std::getline(list, name, ',');) {
    auto found = std::find_if(points.begin(), points.end(),
                              [&](const PlanSetPoint &point) { return point.name == name; });
    if (found == points.end())
      throw Error(fmt::format("the plan set has no point '{}'", name));
    selected.push_back(*found);
  }
  return selected;
}

double defaultOverTuned(const TuneReport &report) {
  const CandidateResult *heuristic = report.heuristicResult();
  const CandidateResult *best = report.best();
  if (!heuristic || !best || heuristic->status != CandidateStatus::Measured ||
      heuristic->milliseconds <= 0)
    return 0;
  return best->milliseconds / heuristic->milliseconds;
}

std::string planSetDataHeader() {
  return "point\tbatch\tseqlen_q\tseqlen_k\tblock_m\tblock_n\tstages\tconsumer_warpgroups\t"
         "consumer_registers\tproducer_registers\tsoftmax_chains\tpersistent_blocks_per_sm\t"
         "registers\tlocal_bytes\tms\theuristic\tfinalist\tscreen_ms\n";
}

std::string planSetDataRows(const PlanSetPoint &point, const TuneReport &report) {
  std::string rows;
  for (const CandidateResult &result : report.results) {
    if (result.status != CandidateStatus::Measured)
      continue;
    const TileConfig &c = result.config;
    rows += fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.6f}\t{}\t{}\t{:.6f}\n",
                        point.name, report.shape.batch, report.shape.seqlenQ,
                        report.shape.seqlenK, c.blockM, c.blockN, c.stages,
                        c.consumerWarpgroups, c.consumerRegisters, c.producerRegisters,
                        c.softmaxChains, c.persistentBlocksPerSm, result.registers,
                        result.localBytes, result.milliseconds, result.heuristic ? 1 : 0,
                        result.finalist ? 1 : 0, result.screenMilliseconds);
  }
  return rows;
}

std::map<std::string, TileConfig> readRecordedTunedPlans(const std::vector<std::string> &paths,
                                                         const std::vector<PlanSetPoint> &points) {
  std::map<std::string, TileConfig> plans;
  for (const std::string &path : paths) {
    std::ifstream file(path);
    if (!file)
      throw Error(fmt::format("{}: cannot read the plan-set data", path));
    auto split = [](const std::string &line) {
      std::vector<std::string> fields;
      std::istringstream stream(line);
      for (std::string field; std::getline(stream, field, '\t');)
        fields.push_back(field);
      return fields;
    };
    std::string line;
    std::getline(file, line);
    const std::vector<std::string> header = split(line);
    auto column = [&](const char *name) {
      auto found = std::find(header.begin(), header.end(), name);
      if (found == header.end())
        throw Error(fmt::format("{}:1: no column '{}'", path, name));
      return static_cast<size_t>(found - header.begin());
    };
    const size_t point = column("point"), ms = column("ms"), finalist = column("finalist");
    const std::pair<const char *, int TileConfig::*> fields[] = {
        {"block_m", &TileConfig::blockM},
        {"block_n", &TileConfig::blockN},
        {"stages", &TileConfig::stages},
        {"consumer_warpgroups", &TileConfig::consumerWarpgroups},
        {"consumer_registers", &TileConfig::consumerRegisters},
        {"producer_registers", &TileConfig::producerRegisters},
        {"softmax_chains", &TileConfig::softmaxChains},
        {"persistent_blocks_per_sm", &TileConfig::persistentBlocksPerSm}};
    std::vector<size_t> fieldColumns;
    for (const auto &field : fields)
      fieldColumns.push_back(column(field.first));
    // This file's fastest finalist of each point, replacing earlier files'.
    std::map<std::string, std::pair<double, TileConfig>> fastest;
    for (int lineNumber = 2; std::getline(file, line); ++lineNumber) {
      if (line.empty())
        continue;
      const std::vector<std::string> row = split(line);
      auto fail = [&](const std::string &why) {
        return Error(fmt::format("{}:{}: {}", path, lineNumber, why));
      };
      if (row.size() != header.size())
        throw fail(fmt::format("{} fields, the header has {}", row.size(), header.size()));
      if (row[finalist] != "1")
        continue;
      TileConfig config;
      for (size_t i = 0; i < fieldColumns.size(); ++i) {
        const std::string &text = row[fieldColumns[i]];
        size_t used = 0;
        int value = 0;
        try {
          value = std::stoi(text, &used);
        } catch (const std::exception &) {
        }
        if (used == 0 || used != text.size())
          throw fail(fmt::format("{} '{}' is not an integer", fields[i].first, text));
        config.*fields[i].second = value;
      }
      double milliseconds = 0;
      try {
        milliseconds = std::stod(row[ms]);
      } catch (const std::exception &) {
        throw fail(fmt::format("ms '{}' is not a number", row[ms]));
      }
      auto [entry, inserted] = fastest.try_emplace(row[point], milliseconds, config);
      if (!inserted && milliseconds < entry->second.first)
        entry->second = {milliseconds, config};
    }
    for (const auto &[name, timed] : fastest)
      plans[name] = timed.second;
  }
  for (const PlanSetPoint &point : points)
    if (!plans.count(point.name))
      throw Error(
          fmt::format("{}: no recorded plan for point '{}'", fmt::join(paths, ", "), point.name));
  return plans;
}

} // namespace attn::tune
