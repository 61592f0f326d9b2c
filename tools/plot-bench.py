#!/usr/bin/env python3
"""Draws the peer-comparison table of docs/benchmarks.md as an SVG.

Usage: plot-bench.py [--page docs/benchmarks.md] [--out docs/images/bench_grid.svg] [--check]

Reads the most recent "## Run of YYYY-MM-DD ..." section that holds a table
with the columns head dim, seqlen, causal, attnc, cuDNN, FA2 and Flex, and
draws TFLOP/s against sequence length (log2 axis): one panel per head dim,
non-causal on the top row (solid lines), causal below (dashed), attnc
beside its peers. Plain Python: the SVG is written by hand, so nothing needs
installing. --check compares with the file instead of writing it and exits
with 1 when it is stale.
"""
import argparse
import math
import os
import re
import sys

SERIES = [  # column, label, colour, stroke width
    ("attnc", "attnc", "#d62728", 2.6),
    ("cuDNN", "cuDNN (SDPA)", "#1f77b4", 1.6),
    ("FA2", "FlashAttention-2 (SDPA)", "#2ca02c", 1.6),
    ("Flex", "FlexAttention", "#9467bd", 1.6),
]
COLUMNS = ["head dim", "seqlen", "causal"] + [s[0] for s in SERIES]

# Layout, in SVG user units (pixels).
PANEL_W, PANEL_H = 260, 190
LEFT, TOP, GAP_X, GAP_Y = 70, 108, 34, 64
RIGHT, BOTTOM = 20, 46


def read_latest_run(page):
    """(heading, rows) of the most recent run; rows are dicts of the columns."""
    runs, heading, rows, header = [], None, None, None
    for line in open(page, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("## "):
            if heading and rows:
                runs.append((heading, rows))
            match = re.match(r"## Run of (\d{4}-\d{2}-\d{2})", line)
            heading, rows, header = (line[3:], [], None) if match else (None, None, None)
            continue
        if heading is None or not line.startswith("|"):
            header = None if not line.startswith("|") else header
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells if all(c in cells for c in COLUMNS) else []
            continue
        if not header or set(cells[0]) <= set("-: "):
            continue
        row = dict(zip(header, cells))
        rows.append({"head_dim": int(row["head dim"]), "seqlen": int(row["seqlen"]),
                     "causal": row["causal"] == "yes",
                     **{name: float(row[name]) for name, *_ in SERIES}})
    if heading and rows:
        runs.append((heading, rows))
    if not runs:
        raise SystemExit(f"plot-bench: no '## Run of DATE' table with {COLUMNS} in {page}")
    # The latest date; among equal dates the first in the page.
    date = lambda run: re.match(r"Run of (\S+)", run[0]).group(1)
    latest = max(date(run) for run in runs)
    return next(run for run in runs if date(run) == latest)


def nice_ceiling(value):
    """The next multiple of 100 above value."""
    return 100 * math.ceil(value / 100 + 1e-9)


def render(heading, rows):
    head_dims = sorted({r["head_dim"] for r in rows})
    seqlens = sorted({r["seqlen"] for r in rows})
    y_max = nice_ceiling(max(r[name] for r in rows for name, *_ in SERIES))
    x_lo, x_hi = math.log2(seqlens[0]), math.log2(seqlens[-1])
    width = LEFT + len(head_dims) * PANEL_W + (len(head_dims) - 1) * GAP_X + RIGHT
    height = TOP + 2 * PANEL_H + GAP_Y + BOTTOM
    out = []
    add = out.append
    add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">')
    add(f'<rect width="{width}" height="{height}" fill="white"/>')
    title = re.sub(r"\s*\(kernel of commit [^)]*\)", "", heading)
    add(f'<text x="{width / 2:.0f}" y="24" text-anchor="middle" font-size="16" '
        f'font-weight="bold">bf16 attention forward, TFLOP/s (higher is better)</text>')
    add(f'<text x="{width / 2:.0f}" y="44" text-anchor="middle" font-size="12" '
        f'fill="#444">{escape(title)}</text>')

    # Legend: one entry per series, then the line style of each row.
    x = LEFT
    for name, label, colour, stroke in SERIES:
        add(f'<line x1="{x}" y1="66" x2="{x + 26}" y2="66" stroke="{colour}" '
            f'stroke-width="{stroke}"/>')
        add(f'<circle cx="{x + 13}" cy="66" r="3" fill="{colour}"/>')
        add(f'<text x="{x + 32}" y="70" font-size="12">{escape(label)}</text>')
        x += 44 + 7 * len(label)
    add(f'<text x="{x + 10}" y="70" font-size="12" fill="#444">solid: non-causal, '
        f'dashed: causal</text>')

    for row_index, causal in enumerate((False, True)):
        for column, head_dim in enumerate(head_dims):
            x0 = LEFT + column * (PANEL_W + GAP_X)
            y0 = TOP + row_index * (PANEL_H + GAP_Y)
            px = lambda s: x0 + (math.log2(s) - x_lo) / (x_hi - x_lo) * PANEL_W
            py = lambda v: y0 + PANEL_H - v / y_max * PANEL_H
            add(f'<text x="{x0 + PANEL_W / 2:.1f}" y="{y0 - 8}" text-anchor="middle" '
                f'font-size="13" font-weight="bold">head dim {head_dim}, '
                f'{"causal" if causal else "non-causal"}</text>')
            add(f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" '
                f'stroke="#888"/>')
            for value in range(0, y_max + 1, 100):  # horizontal gridlines
                y = py(value)
                add(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + PANEL_W}" y2="{y:.1f}" '
                    f'stroke="#ddd"/>')
                if column == 0 or value % 200 == 0:
                    add(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" '
                        f'font-size="10" fill="#444">{value}</text>')
            for s in seqlens:  # vertical gridlines, one per measured length
                x = px(s)
                add(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + PANEL_H}" '
                    f'stroke="#eee"/>')
                label = f"{s // 1024}K" if s >= 1024 else str(s)
                add(f'<text x="{x:.1f}" y="{y0 + PANEL_H + 15}" text-anchor="middle" '
                    f'font-size="10" fill="#444">{label}</text>')
            add(f'<text x="{x0 + PANEL_W / 2:.1f}" y="{y0 + PANEL_H + 32}" '
                f'text-anchor="middle" font-size="11">sequence length (log scale)</text>')
            if column == 0:
                yc = y0 + PANEL_H / 2
                add(f'<text x="{x0 - 44}" y="{yc:.1f}" text-anchor="middle" font-size="11" '
                    f'transform="rotate(-90 {x0 - 44} {yc:.1f})">TFLOP/s</text>')
            points = sorted((r for r in rows if r["head_dim"] == head_dim
                             and r["causal"] == causal), key=lambda r: r["seqlen"])
            # Peers first, so attnc's line is drawn on top.
            for name, label, colour, stroke in SERIES[1:] + SERIES[:1]:
                path = " ".join(f"{px(r['seqlen']):.1f},{py(r[name]):.1f}" for r in points)
                dash = ' stroke-dasharray="6,4"' if causal else ""
                add(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                    f'stroke-width="{stroke}"{dash}/>')
                for r in points:
                    add(f'<circle cx="{px(r["seqlen"]):.1f}" cy="{py(r[name]):.1f}" '
                        f'r="{3 if name == "attnc" else 2.2}" fill="{colour}">'
                        f'<title>{escape(label)}: {r[name]:.1f} TFLOP/s at S = '
                        f'{r["seqlen"]}</title></circle>')
    add("</svg>")
    return "\n".join(out) + "\n"


def escape(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--page", default=os.path.join(root, "docs", "benchmarks.md"))
    parser.add_argument("--out", default=os.path.join(root, "docs", "images", "bench_grid.svg"))
    parser.add_argument("--check", action="store_true",
                        help="exit with 1 if --out differs from what the page gives")
    args = parser.parse_args()
    heading, rows = read_latest_run(args.page)
    svg = render(heading, rows)
    if args.check:
        current = open(args.out).read() if os.path.exists(args.out) else ""
        if current != svg:
            print(f"plot-bench: {args.out} is stale: run tools/plot-bench.py", file=sys.stderr)
            return 1
        print(f"plot-bench: {args.out} is up to date ({len(rows)} points of '{heading}')")
        return 0
    with open(args.out, "w") as out:
        out.write(svg)
    print(f"plot-bench: wrote {args.out} ({len(rows)} points of '{heading}')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
