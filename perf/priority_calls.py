#!/usr/bin/env python3
"""perf/priority_calls.py OUT TRACE_PREFIX [--ranks 2]

Where an urgent call's time goes while a bulk one runs: the caller's time
per contended call (priority_perf --calls 1, its stderr in OUT) set beside
the engine's spans of the same operations (TERN_TRACE=TRACE_PREFIX.%r.json):
issue -> start, issue -> end (the engine done), and end -> the caller's
return (its thread running again).  Run as:

  TERN_TRANSPORT=shm TERN_TRACE=/tmp/t.%r.json tools/ternrun -n 2 \\
      build/perf/priority_perf -n 20 --mode async --delay random --calls 1 > out.txt 2>&1
  perf/priority_calls.py out.txt /tmp/t
"""
import argparse
import json
import re
import statistics


def spans(path, urgent_bytes):
    """The urgent operations (level 0, urgent_bytes) issued while a level-7 one ran."""
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    ops = [e["args"] for e in ev if e.get("ph") == "X"]
    bulk = [o for o in ops if o["level"] == 7]
    return [o for o in ops if o["level"] == 0 and o["bytes"] == urgent_bytes
            and any(b["start_us"] < o["issue_us"] < b["end_us"] for b in bulk)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("trace_prefix")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--urgent-bytes", type=int, default=4 << 20)
    a = ap.parse_args()
    calls = {r: [] for r in range(a.ranks)}
    for line in open(a.out):
        m = re.search(r"call rank (\d+) mode \w+: urgent ([\d.]+) ms", line)
        if m:
            calls[int(m.group(1))].append(float(m.group(2)))
    print("| rank | calls | call ms (median, p90) | issue -> start | issue -> engine done | engine done -> return |")
    print("|---|---|---|---|---|---|")
    for r in range(a.ranks):
        ops = spans("%s.%d.json" % (a.trace_prefix, r), a.urgent_bytes)
        rows = [(c, (o["start_us"] - o["issue_us"]) / 1e3, (o["end_us"] - o["issue_us"]) / 1e3)
                for c, o in zip(calls[r], ops)]
        if not rows:
            continue

        def cell(v):
            v = sorted(v)
            return "%.2f, %.2f" % (statistics.median(v), v[int(0.9 * (len(v) - 1))])
        print("| %d | %d | %s | %s | %s | %s |" % (r, len(rows), cell([x[0] for x in rows]), cell([x[1] for x in rows]),
                                                   cell([x[2] for x in rows]), cell([x[0] - x[2] for x in rows])))


if __name__ == "__main__":
    main()
