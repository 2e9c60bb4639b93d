#!/usr/bin/env python3
"""BENCHMARKS.md's plots (issue 28 item 7), drawn from bench-results/*.tsv.

Usage: scripts/plot-benchmarks.py [--results DIR] [--out DIR]
  (defaults bench-results/ and docs/img/; needs python3-matplotlib)

Each TSV row is one figure: source (`run`: written by a scripts/bench-*.sh
run, scripts/lib.sh bench_tsv_end; `recorded`: copied by hand from
docs/benchmarks-history.md for the benchmarks that boot VMs), date,
command, commit, figure, series, x, stat (`one` for a run's figure, `ratio`
for one against the same run's baseline, `min`/`max` over recorded rounds),
value, unit, note. Every plot names its sources' dates and commands in its
caption so that a figure is never shown without where it came from.

Plots (800x500 PNG):
  loss.png  goodput against loss rate, vhca and soft-RoCE (rxe)
  qps.png   aggregate RC WRITE throughput against the number of QPs
  hops.png  8-byte SEND ping-pong latency by switch hops
"""

import argparse
import csv
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SIZE = (8, 5)
DPI = 100


def load(results):
    rows = []
    for name in sorted(os.listdir(results)):
        if not name.endswith(".tsv"):
            continue
        with open(os.path.join(results, name), newline="") as f:
            for r in csv.DictReader(f, delimiter="\t"):
                r["file"] = name
                r["value"] = float(r["value"])
                rows.append(r)
    return rows


def pick(rows, file, figure, stat=None, series=None):
    return [
        r
        for r in rows
        if r["file"] == file
        and r["figure"] == figure
        and (stat is None or r["stat"] == stat)
        and (series is None or r["series"] == series)
    ]


def source_line(rows):
    """One caption line per distinct (source, date, command) of `rows`."""
    seen = []
    for r in rows:
        k = (r["source"], r["date"], r["command"])
        if k not in seen:
            seen.append(k)
    return "\n".join(f"{s} {d}: {c}" for s, d, c in seen)


def finish(fig, ax, path, caption):
    ax.grid(True, which="both", alpha=0.3)
    # Beside the axes, so that no line hides behind it.
    fig.subplots_adjust(right=0.6, top=0.9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    # A command's `$T` is not mathtext.
    fig.text(0.01, 0.01, caption.replace("$", r"\$"), fontsize=6, va="bottom", ha="left", wrap=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    print(f"plot-benchmarks: wrote {path}")


def numeric(x):
    try:
        return float(x)
    except ValueError:
        return None


def plot_loss(rows, out):
    fig, ax = plt.subplots(figsize=SIZE)
    fig.subplots_adjust(bottom=0.27)
    used = []
    floor = 0.005
    colors = {"WRITE": "tab:blue", "READ": "tab:orange"}
    # vhca, two TCG guests, the final tree: min..max over three rounds.
    for op in ("WRITE", "READ"):
        lo = {}
        hi = {}
        for r in pick(rows, "vm-loss.tsv", "goodput-vs-loss-final", series=f"vhca {op}"):
            x = numeric(r["x"])
            if x is None or r["unit"] != "x of lossless":
                continue
            (lo if r["stat"] == "min" else hi)[x] = r["value"]
            used.append(r)
        xs = sorted(set(lo) | {0.0})
        lo[0.0] = hi[0.0] = 1.0
        ax.fill_between(xs, [lo[x] for x in xs], [hi[x] for x in xs], color=colors[op], alpha=0.25)
        ax.plot(xs, [(lo[x] + hi[x]) / 2 for x in xs], "o-", color=colors[op],
                label=f"vhca {op}, 2 TCG guests\n(3 rounds, min..max)")
    # rxe (and vhca) in one run of the same guests.
    for stack, style in (("rxe", "s--"), ("vhca", "^:")):
        for op in ("WRITE", "READ"):
            pts = []
            for r in pick(rows, "vm-loss.tsv", "goodput-vs-loss", stat="ratio", series=f"{stack} {op}"):
                x = numeric(r["x"])
                if x is not None:
                    pts.append((x, r["value"]))
                    used.append(r)
            pts.sort()
            if not pts:
                continue
            label = (f"soft-RoCE (rxe) {op}, 2 TCG guests\n(one run)" if stack == "rxe"
                     else f"vhca {op}, 2 TCG guests\n(the same run as rxe)")
            ax.plot([p[0] for p in pts], [max(p[1], floor) for p in pts], style, color=colors[op],
                    alpha=0.9 if stack == "rxe" else 0.5, label=label)
            for x, v in pts:
                if v == 0:
                    ax.annotate("stalled", (x, floor), textcoords="offset points", xytext=(4, 4), fontsize=7)
    # vhca, two processes (device tier), this file's run.
    for op in ("Write", "Read"):
        pts = []
        for r in pick(rows, "loss.tsv", "goodput-vs-loss", stat="ratio", series=f"vhca {op} probes on"):
            x = numeric(r["x"])
            if x is not None:
                pts.append((x, r["value"]))
                used.append(r)
        pts.sort()
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "d-.", color=colors[op.upper()],
                    alpha=0.6, label=f"vhca {op.upper()}, device tier\n(2 processes on loopback)")
    ax.set_yscale("log")
    ax.set_ylim(floor * 0.8, 2)
    ax.set_xlabel("packets lost (%, both ways)")
    ax.set_ylabel("goodput / same stack's lossless goodput")
    ax.set_title("RC goodput under loss: vhca against soft-RoCE", fontsize=10)
    finish(fig, ax, os.path.join(out, "loss.png"), source_line(used))


def plot_qps(rows, out):
    fig, ax = plt.subplots(figsize=SIZE)
    fig.subplots_adjust(bottom=0.2)
    used = []
    # (file, date, series) -> x -> values: a recorded set of runs has several
    # values per point (drawn as median with a min..max band), a run one.
    lines = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["figure"] == "aggregate-write-64k" and r["stat"] == "one":
            load = r["note"].split(" at the start")[0] if r["source"] == "run" else ""
            lines[(r["file"], r["date"], r["series"], r["source"], load)][float(r["x"])].append(r["value"])
            used.append(r)
    for (file, date, series, source, load), pts in sorted(lines.items()):
        xs = sorted(pts)
        mid = [sorted(pts[x])[len(pts[x]) // 2] for x in xs]
        n = max(len(v) for v in pts.values())
        what = f"median of {n} runs, min..max" if n > 1 else f"one run, {load}"
        (line,) = ax.plot(xs, mid, "o-", label=f"{series}\n({source} {date},\n{what})")
        if n > 1:
            ax.fill_between(xs, [min(pts[x]) for x in xs], [max(pts[x]) for x in xs],
                            color=line.get_color(), alpha=0.2)
        for x, v in zip(xs, mid):
            ax.annotate(f"{v / mid[0]:.2f}x", (x, v), textcoords="offset points", xytext=(4, -10),
                        fontsize=7, color=line.get_color())
    ax.set_xscale("log", base=2)
    ticks = sorted({x for pts in lines.values() for x in pts})
    ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("active RC QPs (32 messages of 64 KiB in flight in all)")
    ax.set_ylabel("aggregate RC WRITE, GB/s (ratio: to 1 QP)")
    ax.set_title("Aggregate RC WRITE 64 KiB against the number of QPs", fontsize=10)
    finish(fig, ax, os.path.join(out, "qps.png"), source_line(used))


def plot_hops(rows, out):
    fig, ax = plt.subplots(figsize=SIZE)
    fig.subplots_adjust(bottom=0.2)
    used = []
    rounds = defaultdict(list)
    for r in pick(rows, "fabric.tsv", "p50-by-hops", stat="one"):
        rounds[r["series"]].append((float(r["x"]), r["value"]))
        used.append(r)
    for series, pts in sorted(rounds.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", alpha=0.8,
                label=f"fat tree, {series}")
    sw = defaultdict(dict)
    for r in pick(rows, "switch.tsv", "switch-p50", stat="one"):
        hops = {"back-to-back": 0, "one switch hop": 1}.get(r["series"])
        if hops is not None:
            sw[r["x"]][hops] = r["value"]
            used.append(r)
    for i, (rnd, pts) in enumerate(sorted(sw.items())):
        xs = sorted(pts)
        ax.plot(xs, [pts[x] for x in xs], "s--", color="gray", alpha=0.6,
                label="one switch against a cable\n(bench-switch.sh rounds)" if i == 0 else None)
    ax.set_xticks([0, 1, 2, 3])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("switches on the path (fat tree: 0 back to back, 1 one leaf, 3 leaf, spine, leaf)")
    ax.set_ylabel("8-byte SEND ping-pong p50 round trip, us")
    ax.set_title("Latency by hop count (vhca switch, static fabric)", fontsize=10)
    finish(fig, ax, os.path.join(out, "hops.png"), source_line(used))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="bench-results")
    ap.add_argument("--out", default="docs/img")
    a = ap.parse_args()
    rows = load(a.results)
    if not rows:
        sys.exit(f"plot-benchmarks: no rows in {a.results}/*.tsv")
    os.makedirs(a.out, exist_ok=True)
    plot_loss(rows, a.out)
    plot_qps(rows, a.out)
    plot_hops(rows, a.out)


if __name__ == "__main__":
    main()
