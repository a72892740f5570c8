#!/usr/bin/env python3
"""Markdown tables and plots from a bench/run.sh results.csv
(timestamp,label,workload,metric,value,unit; label = peer).

  report.py CSV --labels f2fuse,ext4,fuse2fs [--outdir DIR] [--title T]
      headline metrics (the shared kit's list, lib/csv2md.py) per peer, ratios
      f2fuse/ext4 and f2fuse/fuse2fs, and f2fuse/limit where the peers null
      (a FUSE file system that stores nothing) and raw (the backing directory)
      ran: the limit is the worse of the two, or raw alone for fsync-bound rows
      (null makes nothing durable); f2fuse's cleaning work per workload group;
      with --outdir and matplotlib: DIR/metrics.png and DIR/ratios.png
  report.py CSV --policy W2 --labels max_victim_search=20,max_victim_search=4096
      one workload group, one row per tunable value (policy mode)

Markdown goes to stdout.
"""
import argparse
import csv
import math
import os
import sys
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from csv2md import HEADLINE, fmt  # noqa: E402  (the shared kit's metric list)

OURS = "f2fuse"
HIGHER_IS_BETTER = {"MiB/s", "IOPS", "files/s"}
LOWER_IS_BETTER = {"ms", "s", "us"}
GROUPS = ("w1a", "w1b", "w3", "w4", "w5", "w2")
GC_ROWS = [(g, m, f"f2fuse cleaning during {g.upper()}: {what}")
           for g in GROUPS for m, what in (("gc_runs", "GC runs"), ("gc_blocks_moved", "blocks moved"))]
EXTRA_ROWS = [("w2", "rewrite_s", "W2 4k sync rewrites, time s"),
              ("w2", "rewrite_p50_ms", "W2 4k sync rewrites, p50 ms")]
# f2fuse's device flushes and checkpoints during a whole workload group (the daemon's counters)
FLUSH_ROWS = [(g, m, f"f2fuse during {g.upper()}: {what}") for g in ("w2", "w5")
              for m, what in (("device_flushes", "device flushes"), ("checkpoints", "checkpoints"))]
LIMIT_PEERS = ("null", "raw")
LIMIT = "limit"


def fsync_bound(wl, metric):
    """Rows whose every operation ends in an fsync (the device flush is the cost)."""
    return wl == "w5" and metric == "write_iops" or wl == "w2" and metric.startswith("rewrite_") \
        or wl.startswith(("w4-new-fsync-", "w4-over-fsync-"))


def limit_of(cells, wl, metric, unit):
    """The limit f2fuse is held against: raw for fsync-bound rows, else the worse of
    null and raw (lower throughput, higher time); None when not measured."""
    if fsync_bound(wl, metric):
        return cells.get("raw", (None, None))[1]
    vals = [cells[p][1] for p in LIMIT_PEERS if p in cells and cells[p][1] is not None]
    if not vals or direction(unit) == "":
        return None
    return min(vals) if unit in HIGHER_IS_BETTER else max(vals)


POLICY_COLUMNS = {
    "w2": [("rewrite_ops", "rewrites"), ("rewrite_s", "rewrite s"), ("rewrite_iops", "rewrite IOPS"), ("rewrite_p50_ms", "p50 ms"),
           ("rewrite_p99_ms", "p99 ms"), ("rewrite_max_ms", "max ms"), ("fill_files_per_s", "fill files/s"),
           ("gc_runs", "GC runs"), ("gc_blocks_moved", "blocks moved"),
           ("data_in_place", "blocks in place"), ("data_out_of_place", "blocks out of place"),
           ("device_bytes_written", "device bytes written")],
    "w5": [("write_iops", "IOPS"), ("device_bytes_written", "device bytes written"),
           ("data_in_place", "blocks in place"), ("data_out_of_place", "blocks out of place"),
           ("extents", "extents after"), ("gc_blocks_moved", "GC blocks moved")],
}


def load(path):
    data = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            # last value wins (run.sh appends suite_wall_s and extents after the kit's rows)
            data.setdefault(r["label"], {})[(r["workload"], r["metric"])] = (r["value"], r["unit"])
    return data


def num(cell):
    try:
        x = float(cell[0])
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def cell(d, wl, metric):
    """(text, number) for one label: value, else the workload's FAIL status, else '-'."""
    if (wl, metric) in d:
        return fmt(d[(wl, metric)][0]), num(d[(wl, metric)])
    base = wl.split(".")[0]
    for key in ((wl, "status"), (base.split("-")[0], "status"), ("meta", "status")):
        if key in d:
            return f"{d[key][0]} ({d[key][1]})", None
    return "-", None


def unit_of(data, wl, metric):
    for d in data.values():
        if (wl, metric) in d:
            return d[(wl, metric)][1]
    return ""


def direction(unit):
    return "↑" if unit in HIGHER_IS_BETTER else "↓" if unit in LOWER_IS_BETTER else ""


def compare(data, labels, title, outdir):
    peers = [p for p in ("ext4", "fuse2fs") if OURS in labels and p in labels]
    with_limit = OURS in labels and any(p in labels for p in LIMIT_PEERS)
    head = ["workload / metric", ""] + labels + [f"{OURS}/{p}" for p in peers] + \
        ([f"{OURS}/{LIMIT}"] if with_limit else [])
    out = [f"# {title}", "", "↑ higher is better, ↓ lower is better; ratio = f2fuse value / peer value."
           + (f" {LIMIT}: the worse of {' and '.join(LIMIT_PEERS)} (fsync-bound rows, marked *: raw)."
              if with_limit else ""), "",
           "| " + " | ".join(head) + " |", "|---|:-:|" + "---:|" * (len(head) - 2)]
    plotted = []
    gc_rows = GC_ROWS
    ours = data.get(OURS, {})
    if OURS in labels and not any(num(ours[(g, m)]) is not None for g, m, _ in GC_ROWS if (g, m) in ours):
        gc_rows = []  # no daemon counters (status command absent): one line below instead
    for wl, metric, desc in HEADLINE[:-1] + EXTRA_ROWS + [HEADLINE[-1]] + gc_rows + FLUSH_ROWS:
        if (wl, metric) == ("w5", "extents"):
            desc += "; f2fuse: `f2fuse extents`"
        cells = {lab: cell(data.get(lab, {}), wl, metric) for lab in labels}
        if all(t == "-" for t, _ in cells.values()):
            continue
        unit = unit_of(data, wl, metric)
        ratios = []
        for p in peers:
            a, b = cells[OURS][1], cells[p][1]
            ratios.append((a / b) if a is not None and b else None)
        shown = list(ratios)
        if with_limit:
            a, b = cells[OURS][1], limit_of(cells, wl, metric, unit)
            shown.append((a / b) if a is not None and b else None)
            if fsync_bound(wl, metric):
                desc += " *"
        row = [desc, direction(unit)] + [cells[lab][0] for lab in labels] + \
            ["-" if r is None else f"{r:.2f}" for r in shown]
        out.append("| " + " | ".join(row) + " |")
        if not metric.startswith("gc_") and metric not in ("suite_wall_s", "device_flushes", "checkpoints"):
            plotted.append((desc, unit, {lab: cells[lab][1] for lab in labels}, dict(zip(peers, ratios))))
    if OURS in labels and not gc_rows:
        reason = next((ours[(g, m)][1] for g, m, _ in GC_ROWS if (g, m) in ours), "not measured")
        out += ["", f"f2fuse GC runs / blocks moved per workload: NA ({reason})."]
    fails = [f"{lab}: {wl} {m} = {v[0]} ({v[1]})" for lab in labels for (wl, m), v in data.get(lab, {}).items()
             if m == "status"]
    if fails:
        out += ["", "**Failures:**", ""] + [f"- {f}" for f in fails]
    print("\n".join(out))
    if outdir:
        plot(plotted, labels, peers, outdir, title)


def plot(rows, labels, peers, outdir, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(no plots: python3-matplotlib is not installed)")
        return
    colors = dict(zip(labels, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3))
    cols = min(6, max(1, len(rows)))
    nrows = max(1, math.ceil(len(rows) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), squeeze=False)
    for ax, (desc, unit, vals, _) in zip(axes.flat, rows):
        ys = [vals[lab] if vals[lab] is not None else 0 for lab in labels]
        ax.bar(range(len(labels)), ys, color=[colors[lab] for lab in labels])
        for i, lab in enumerate(labels):
            if vals[lab] is None:
                ax.text(i, 0, "NA", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_title("\n".join(textwrap.wrap(f"{desc} {direction(unit)}", 34)), fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "metrics.png"), dpi=110)
    plt.close(fig)

    rrows = [r for r in rows if any(r[3].get(p) for p in peers)]
    if not rrows:
        return
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rrows) * max(1, len(peers)) + 1.5))
    h = 0.8 / max(1, len(peers))
    for j, p in enumerate(peers):
        ys = [i + j * h for i in range(len(rrows))]
        xs = [r[3].get(p) or float("nan") for r in rrows]
        ax.barh(ys, xs, height=h, label=f"{OURS}/{p}", color=colors.get(p))
    ax.set_yticks([i + h * (len(peers) - 1) / 2 for i in range(len(rrows))],
                  [f"{r[0]} {direction(r[1])}" for r in rrows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("ratio (log scale; 1 = parity; ↑ metrics: >1 is f2fuse faster, ↓ metrics: <1 is better)")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "ratios.png"), dpi=110)
    plt.close(fig)
    print("\nPlots: metrics.png (every metric, bars per peer), ratios.png (f2fuse / peer).")


def policy(data, labels, group):
    cols = POLICY_COLUMNS.get(group)
    if cols is None:  # generic: the throughput metrics of the group's workloads
        seen = []
        for lab in labels:
            for (wl, m) in data.get(lab, {}):
                if (wl == group or wl.startswith(group + "-")) and m.endswith(("_MiBps", "_iops")) \
                        and m != "total_MiBps" and (wl, m) not in seen:
                    seen.append((wl, m))
        rows = [(wl, m, f"{wl} {m}") for wl, m in seen] + \
            [(group, "gc_runs", "GC runs"), (group, "gc_blocks_moved", "blocks moved")]
        out = [f"# Policy run: {group.upper()}", "", "| workload / metric | " + " | ".join(labels) + " |",
               "|---|" + "---:|" * len(labels)]
        for wl, m, desc in rows:
            out.append(f"| {desc} | " + " | ".join(cell(data.get(lab, {}), wl, m)[0] for lab in labels) + " |")
    else:
        out = [f"# Policy run: {group.upper()}", "", "| value | " + " | ".join(d for _, d in cols) + " |",
               "|---|" + "---:|" * len(cols)]
        for lab in labels:
            d = data.get(lab, {})
            out.append(f"| {lab} | " + " | ".join(cell(d, group, m)[0] for m, _ in cols) + " |")
    print("\n".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--labels", required=True)
    ap.add_argument("--outdir")
    ap.add_argument("--title", default="f2fuse vs peers")
    ap.add_argument("--policy", metavar="GROUP")
    a = ap.parse_args()
    data = load(a.csv)
    labels = a.labels.split(",")
    if a.policy:
        policy(data, labels, a.policy.lower())
    else:
        compare(data, labels, a.title, a.outdir)


if __name__ == "__main__":
    main()
