#!/usr/bin/env python3
"""Read f2fuse's daemon reports for bench/run.sh; print 'metric,value,unit' lines.

  f2fuse_counters.py gc-delta BEFORE.json AFTER.json
      two `f2fuse status MNT --json` snapshots -> cleaning work done between them:
      gc_runs, gc_blocks_moved and, when present, their parts (gc_foreground_runs,
      gc_background_runs, gc_data_blocks_moved, gc_node_blocks_moved, gc_sections_cleaned),
      device_bytes_written, data_in_place and data_out_of_place (blocks, all logs),
      device_flushes and checkpoints
  f2fuse_counters.py extent-count FILE
      the output of `f2fuse extents MNT PATH` -> one number (or NA)

The status JSON is matched by counter name, wherever it is nested: the engine's
GcStats names (foreground_runs, background_runs, data_blocks_moved,
node_blocks_moved, sections_cleaned) or totals named gc_runs / blocks_moved.
"""
import json
import re
import sys

PARTS = ("foreground_runs", "background_runs", "data_blocks_moved", "node_blocks_moved",
         "sections_cleaned")


def leaves(node, path=()):
    """Numeric leaves of a JSON document as {dotted.path: number}."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, path + (str(k),))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, path + (str(i),))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield ".".join(path), node


def counters(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not text.strip():
        raise ValueError(f"{path}: empty status")
    return dict(leaves(json.loads(text)))


def pick(delta, names):
    """Sum of the leaves whose last path component is one of names (None if none)."""
    vals = [v for k, v in delta.items() if k.split(".")[-1] in names]
    return sum(vals) if vals else None


def gc_delta(before_path, after_path):
    before, after = counters(before_path), counters(after_path)
    delta = {k: after[k] - before.get(k, 0) for k in after}
    out = []
    parts = {p: pick(delta, (p, "gc_" + p)) for p in PARTS}
    runs = pick(delta, ("gc_runs",))
    if runs is None and (parts["foreground_runs"] is not None or parts["background_runs"] is not None):
        runs = (parts["foreground_runs"] or 0) + (parts["background_runs"] or 0)
    moved = pick(delta, ("blocks_moved", "gc_blocks_moved"))
    if moved is None and (parts["data_blocks_moved"] is not None or parts["node_blocks_moved"] is not None):
        moved = (parts["data_blocks_moved"] or 0) + (parts["node_blocks_moved"] or 0)
    out.append(("gc_runs", "NA" if runs is None else runs, "runs" if runs is not None else "not-in-status"))
    out.append(("gc_blocks_moved", "NA" if moved is None else moved,
                "blocks" if moved is not None else "not-in-status"))
    for p, v in parts.items():
        if v is not None:
            out.append(("gc_" + p, v, "count"))
    # Device bytes written, and data blocks written in / out of place summed over the logs.
    v = pick(delta, ("total_written",))
    if v is not None:
        out.append(("device_bytes_written", v, "bytes"))
    for name, key in (("device_flushes", "flushes"), ("checkpoints", "checkpoints")):
        v = delta.get(key, delta.get("io." + key))
        if v is not None:
            out.append((name, v, "count"))
    for name in ("data_in_place", "data_out_of_place"):
        per_log = {k: v for k, v in delta.items() if k.startswith("logs.")}
        v = pick(per_log, (name,))
        if v is not None:
            out.append((name, v, "blocks"))
    for m, v, u in out:
        print(f"{m},{v},{u}")


def extent_count(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, list):
        return len(doc)
    if isinstance(doc, dict):
        for key in ("extent_count", "extents", "count"):
            v = doc.get(key)
            if isinstance(v, list):
                return len(v)
            if isinstance(v, int):
                return v
    m = re.search(r"(\d+)\s+extents?\b", text)
    if m:
        return int(m.group(1))
    rows = [ln for ln in text.splitlines() if re.match(r"\s*\d+\s*[:|\s]", ln)]
    return len(rows) if rows else "NA"


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "gc-delta":
        gc_delta(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "extent-count":
        print(extent_count(sys.argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
