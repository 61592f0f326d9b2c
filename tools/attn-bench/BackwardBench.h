//===- BackwardBench.h - attn-bench's backward measurements -----*- C++ -*-===//
#ifndef ATTN_TOOLS_ATTNBENCH_BACKWARDBENCH_H
#define ATTN_TOOLS_ATTNBENCH_BACKWARDBENCH_H

#include <string>
#include <vector>

namespace attn::bench {

/// `attn-bench --backward-grid`: the backward at head dims 64, 128 and 256,
/// seqlen 1024 to 16384, causal and not, B x S = 16384, H x D = 2048:
/// TFLOP/s (2.5 x the forward's FLOPs over the backward's time), the
/// deterministic mode's, and the forward + backward step beside the forward
/// alone. Non-empty `headDims` / `seqlens` keep only those points.
int runBackwardGrid(int warmup, int repeats, const std::vector<int> &headDims = {},
                    const std::vector<int64_t> &seqlens = {});

/// `attn-bench spec.mlir --backward`: one spec's backward at (batch,
/// seqlen, seqlenK), optionally checked against the CPU reference first;
/// `backwardTile` overrides settings of the backward's plan.
int runBackwardSpec(const std::string &spec, const std::string &name, int64_t batch,
                    int64_t seqlen, int64_t seqlenK, const std::vector<std::string> &captures,
                    bool tileCoverage, bool check, int warmup, int repeats,
                    const std::string &backwardTile = "");

/// `attn-bench --linear-backward-grid`: the backward of retention, gated
/// retention and linear attention at head dim 128, H = 16, bf16, B x S =
/// 16384 (S = 4096 to 16384), B = 1 at S = 32768, 65536 and 8192: each
/// kernel's forward and backward time (planned for the shape) and the
/// backward's bandwidth over q, k, v, dO read and dq, dk, dv written.
int runLinearBackwardGrid(int warmup, int repeats);

} // namespace attn::bench

#endif // ATTN_TOOLS_ATTNBENCH_BACKWARDBENCH_H
