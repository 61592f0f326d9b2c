#!/usr/bin/env python3
"""Fits a cost model of tile plans to the plan set's recorded candidates and
says how well its pick would do against attn-tile's heuristic.

    python3 tools/plan-set/fit.py [tools/plan-set/data/h200-2026-11-29.tsv ...]

Data: the rows `attn-bench --plan-set --plan-set-data` writes, one per
measured candidate of a point (docs/tuning.md, "The plan set"). A candidate's
time is its screen (`screen_ms`), or `ms` where the screen was not recorded
(the first runs' finalists, whose `ms` is the median of their rounds).

Model: ridge regression of log(time / the point's fastest time) on the
plan's fields and their crossings with the point's head dim, mask and wave
count (features() lists them); the point's own fields (spec, shape) enter
only through those crossings, since a model must rank the plans of one
point, not the points. Its pick for a point is the plan of least predicted
time among those without spills.

Evaluation, per point: speed of the heuristic's plan and of the model's
pick as fractions of the fastest candidate's speed, the model fitted with
that point left out (what a new spec and shape would get) and with every
point (how well the features can describe the data at all); beside them a
rule without a model, the plan that ran best on average over the other
points that measured it. The figures
are only as general as the points recorded: a head dim or mask that only
the left-out point has is extrapolated.

Pure Python (no numpy), so that it runs wherever the repository does.
"""

import argparse
import csv
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MULTIPROCESSORS = 132  # H100 SXM and H200, the cards the data comes from


def read_points(path):
    """name -> (head_dim, q_heads, mask kind) from points.txt and the specs."""
    points = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, spec = line.split()[:2]
            with open(os.path.join(os.path.dirname(path), spec)) as s:
                text = s.read()
            head_dim = int(re.search(r"head_dim\s*=\s*(\d+)", text).group(1))
            q_heads = int(re.search(r"q_heads\s*=\s*(\d+)", text).group(1))
            if "#attn.causal" in text:
                mask = "causal"
            elif "#attn.sliding_window" in text:
                mask = "window"
            elif "mask_mod" in text:
                mask = "mask_mod"
            else:
                mask = "none"
            points[name] = (head_dim, q_heads, mask)
    return points


def read_rows(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            for row in csv.DictReader(f, delimiter="\t"):
                screen = row.get("screen_ms", "nan")
                time = float(screen) if screen not in ("", "nan") else float(row["ms"])
                if not math.isfinite(time) or time <= 0:
                    continue
                row["time"] = time
                rows.append(row)
    return rows


def features(row, point):
    """The plan's fields, scaled near 1, and their crossings with the point."""
    head_dim, q_heads, mask = point
    block_m, block_n = int(row["block_m"]), int(row["block_n"])
    stages, consumers = int(row["stages"]), int(row["consumer_warpgroups"])
    chains, persistent = int(row["softmax_chains"]), int(row["persistent_blocks_per_sm"])
    batch, seqlen_q = int(row["batch"]), int(row["seqlen_q"])
    tiles = batch * q_heads * math.ceil(seqlen_q / block_m)
    waves = tiles / MULTIPROCESSORS
    # How full the last wave of a block-per-tile grid runs (a persistent grid
    # balances its tiles instead).
    wave_fill = 1.0 if persistent else waves / math.ceil(waves)
    masked = 1.0 if mask in ("causal", "window", "mask_mod") else 0.0
    dim = head_dim / 128.0
    n = block_n / 128.0
    f = [
        1.0,
        consumers == 1, consumers == 3,
        n, n * n, n * dim, n * masked,
        stages == 1, stages == 3, stages == 4,
        stages * dim / 4.0,
        chains == 2, chains == 4,
        persistent, persistent * masked,
        float(row["local_bytes"]) > 0,
        math.log2(max(waves, 1e-3)) / 4.0,
        wave_fill,
        (consumers == 3) * dim, (consumers == 1) * dim,
    ]
    return [float(x) for x in f]


def solve(matrix, vector):
    """Gaussian elimination with partial pivoting: matrix x = vector."""
    size = len(vector)
    a = [row[:] + [vector[i]] for i, row in enumerate(matrix)]
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        if abs(a[col][col]) < 1e-12:
            continue
        for r in range(size):
            if r != col:
                factor = a[r][col] / a[col][col]
                if factor:
                    for c in range(col, size + 1):
                        a[r][c] -= factor * a[col][c]
    return [a[i][size] / a[i][i] if abs(a[i][i]) >= 1e-12 else 0.0 for i in range(size)]


def fit(samples, ridge):
    """Weights minimizing |X w - y|^2 + ridge |w|^2 (the bias unpenalized)."""
    width = len(samples[0][0])
    gram = [[0.0] * width for _ in range(width)]
    moment = [0.0] * width
    for x, y in samples:
        for i in range(width):
            if x[i]:
                moment[i] += x[i] * y
                row = gram[i]
                for j in range(width):
                    row[j] += x[i] * x[j]
    for i in range(1, width):
        gram[i][i] += ridge * len(samples)
    return solve(gram, moment)


def predict(weights, x):
    return sum(w * v for w, v in zip(weights, x))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="*",
                        default=[os.path.join(HERE, "data", "h200-2026-11-29.tsv")])
    parser.add_argument("--points", default=os.path.join(HERE, "points.txt"))
    parser.add_argument("--ridge", type=float, default=1e-3)
    args = parser.parse_args(argv)

    points = read_points(args.points)
    rows = read_rows(args.data)
    by_point = {}
    for row in rows:
        if row["point"] not in points:
            sys.exit(f"fit.py: point {row['point']} is not in {args.points}")
        by_point.setdefault(row["point"], []).append(row)
    samples = {}
    for name, group in by_point.items():
        fastest = min(r["time"] for r in group)
        samples[name] = [(features(r, points[name]), math.log(r["time"] / fastest), r)
                         for r in group]

    def pick_fraction(weights, name):
        group = samples[name]
        fastest = min(r["time"] for _, _, r in group)
        allowed = [s for s in group if float(s[2]["local_bytes"]) == 0] or group
        chosen = min(allowed, key=lambda s: predict(weights, s[0]))[2]
        return fastest / chosen["time"], chosen

    def plan_key(r):
        return tuple(r[k] for k in ("block_m", "block_n", "stages", "consumer_warpgroups",
                                    "softmax_chains", "persistent_blocks_per_sm"))

    def consensus_fraction(name):
        """The plan with the least mean log(time / fastest) over the other
        points that measured it (a rule the data could justify without a
        model): the held-out point's pick among the plans they share."""
        totals = {}
        for other, group in samples.items():
            if other != name:
                for _, y, r in group:
                    total = totals.setdefault(plan_key(r), [0.0, 0])
                    total[0] += y
                    total[1] += 1
        group = samples[name]
        fastest = min(r["time"] for _, _, r in group)
        shared = [r for _, _, r in group
                  if plan_key(r) in totals and float(r["local_bytes"]) == 0]
        if not shared:
            return float("nan")
        chosen = min(shared, key=lambda r: totals[plan_key(r)][0] / totals[plan_key(r)][1])
        return fastest / chosen["time"]

    everything = [(x, y) for group in samples.values() for x, y, _ in group]
    all_weights = fit(everything, args.ridge)
    print(f"{len(rows)} candidates of {len(samples)} points, {len(everything[0][0])} features\n")
    print("| point | candidates | heuristic | model, point left out (its pick) | model, every "
          "point | the others' best plan |")
    print("|---|---|---|---|---|---|")
    summary = {"heuristic": [], "left out": [], "every": [], "others' best plan": []}
    for name in sorted(samples):
        group = samples[name]
        fastest = min(r["time"] for _, _, r in group)
        heuristic = [r for _, _, r in group if r["heuristic"] == "1"]
        heuristic_fraction = fastest / heuristic[0]["time"] if heuristic else float("nan")
        others = [(x, y) for other, g in samples.items() if other != name for x, y, _ in g]
        left_out, chosen = pick_fraction(fit(others, args.ridge), name)
        every, _ = pick_fraction(all_weights, name)
        plan = (f"{chosen['block_m']}x{chosen['block_n']} s{chosen['stages']} "
                f"c{chosen['softmax_chains']} p{chosen['persistent_blocks_per_sm']}")
        consensus = consensus_fraction(name)
        print(f"| {name} | {len(group)} | {heuristic_fraction:.3f} | {left_out:.3f} ({plan}) | "
              f"{every:.3f} | {consensus:.3f} |")
        summary["others' best plan"].append(consensus)
        summary["heuristic"].append(heuristic_fraction)
        summary["left out"].append(left_out)
        summary["every"].append(every)
    print()
    for key, values in summary.items():
        values = sorted(v for v in values if math.isfinite(v))
        if not values:
            print(f"{key}: no point")
            continue
        median = values[len(values) // 2] if len(values) % 2 else \
            0.5 * (values[len(values) // 2 - 1] + values[len(values) // 2])
        print(f"{key}: median {median:.3f}, least {values[0]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
