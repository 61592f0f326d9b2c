//===- PlanSet.h - Spec x shape points for default-vs-tuned runs -*- C++ -*-===//
//
// The plan set (tools/plan-set/points.txt): spec x shape points beyond the
// peer grid, on which attn-bench --plan-set times attn-tile's default plan
// against the tuned one, and whose measured candidates (every plan the
// tuner timed, with its time) are the data a cost model of plans is
// fitted to.
//
//===----------------------------------------------------------------------===//
#ifndef ATTN_TUNE_PLANSET_H
#define ATTN_TUNE_PLANSET_H

#include "Tuner.h"

#include <map>
#include <string>
#include <vector>

namespace attn::tune {

/// One point: a spec (its text and where it came from), a shape and the
/// generators of its captures (attn-bench's --capture syntax).
struct PlanSetPoint {
  std::string name;
  std::string specPath;
  std::string specText;
  TuningShape shape;
  std::vector<std::string> captures;
  int line = 0;
};

/// Reads a plan set: one point a line, `NAME SPEC B,Sq,Sk [CAPTURE...]`,
/// `#` starting a comment, SPEC relative to the file's directory. Throws
/// attn::Error as "FILE:LINE: ..." for a malformed line, an unreadable
/// spec or a repeated name.
std::vector<PlanSetPoint> readPlanSet(const std::string &path);

/// The points whose names `names` lists (comma-separated; every point when
/// empty). Throws attn::Error naming an unknown name.
std::vector<PlanSetPoint> selectPlanSetPoints(const std::vector<PlanSetPoint> &points,
                                              const std::string &names);

/// The default plan's speed as a fraction of the tuned plan's (tuned time
/// over default time, 1 when the heuristic is the best), or 0 when either
/// was not measured.
double defaultOverTuned(const TuneReport &report);

/// Tab-separated rows, one per measured candidate of `report` at `point`:
/// the point, the plan's fields, its time, whether it is the heuristic and
/// whether it was a finalist (timed in rounds rather than screened).
std::string planSetDataHeader();
std::string planSetDataRows(const PlanSetPoint &point, const TuneReport &report);

/// The plan each point's recorded candidates put first, from plan-set data
/// files (planSetDataHeader's columns): the finalist with the least time.
/// A point recorded in several files takes the last file's plan. Throws
/// attn::Error as "FILE:LINE: ..." for a file that cannot be read, a
/// missing column or a malformed row, and names any of `points` that no
/// file records.
std::map<std::string, TileConfig> readRecordedTunedPlans(const std::vector<std::string> &paths,
                                                         const std::vector<PlanSetPoint> &points);

} // namespace attn::tune

#endif // ATTN_TUNE_PLANSET_H
