#!/usr/bin/env python3
"""Joins the attn-bench --grid table with the peer script's CSV into one
markdown table (ours next to each peer, same shapes), for docs/benchmarks.md.

Usage: join_tables.py BENCH_GRID_LOG PEERS_CSV
"""
import csv
import sys


def read_ours(path):
    ours = {}
    for line in open(path):
        # head dim | seqlen | causal | TFLOP/s | ms [| plan]
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        head_dim, seqlen, causal, tflops = cells[:4]
        ours[(int(head_dim), int(seqlen), causal == "yes")] = float(tflops)
    return ours


def main():
    ours = read_ours(sys.argv[1])
    print("| head dim | seqlen | causal | attnc | cuDNN | FA2 | Flex | attnc / cuDNN |")
    print("|---|---|---|---|---|---|---|---|")
    rows = list(csv.DictReader(open(sys.argv[2])))
    rows.sort(key=lambda r: (int(r["head_dim"]), r["causal"], int(r["seqlen"])))
    def peer(row, name):
        # A peer left out of the run (attn_peers.py --peers) has no column.
        value = row.get(name)
        return f"{float(value):.1f}" if value else "-"

    for row in rows:
        key = (int(row["head_dim"]), int(row["seqlen"]), row["causal"] == "1")
        mine = ours.get(key)
        cudnn = float(row["cudnn"])
        ratio = f"{mine / cudnn:.2f}" if mine else "-"
        print(f"| {key[0]} | {key[1]} | {'yes' if key[2] else 'no'} | "
              f"{mine if mine else '-'} | {cudnn:.1f} | {peer(row, 'flash')} | "
              f"{peer(row, 'flex')} | {ratio} |")


if __name__ == "__main__":
    main()
