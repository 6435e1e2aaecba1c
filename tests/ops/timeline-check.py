#!/usr/bin/env python3
"""Check a Chrome trace JSON document written by `fgbuffctl timeline dump` (tests/ops/test-timeline.sh).

Fails (exit 1, one line per problem) unless: the file is valid JSON with a traceEvents list; every
event has the Trace Event Format fields Perfetto needs (ph, pid, tid, name; "X": integer ts and
dur >= 0); each lane (pid, tid) with spans is named by a thread_name event, its spans start in
non-decreasing order and do not overlap; each daemon (pid) has a process_name.  Options add:
  --window T0 T1     every span lies inside [T0, T1] (CLOCK_MONOTONIC us)
  --job NAME:PHASES  the job has spans of each comma-separated phase (e.g. tl-topk:wait,compress)
  --pids A,B,...     spans come from exactly these daemons (world ranks)
  --max-spans N      at most N spans per daemon, and otherData says truncated with drops
  --spans-match      otherData.spans equals the number of spans (one daemon's document)
  --same-events F    F's traceEvents are equal to this file's (paged and unpaged dumps)
Prints a summary line on success."""
import argparse
import collections
import json
import sys

PHASES = {"wait", "compress", "communicate", "decompress", "write-back"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--window", nargs=2, type=int)
    ap.add_argument("--job", action="append", default=[])
    ap.add_argument("--pids")
    ap.add_argument("--max-spans", type=int)
    ap.add_argument("--spans-match", action="store_true")
    ap.add_argument("--same-events")
    a = ap.parse_args()
    errs = []
    with open(a.file, encoding="utf-8") as f:
        doc = json.load(f)
    ev = doc.get("traceEvents")
    if not isinstance(ev, list):
        print("FAIL: no traceEvents list")
        return 1
    lanes = collections.defaultdict(list)
    names, procs = set(), set()
    jobs = collections.defaultdict(set)
    for e in ev:
        for k in ("ph", "pid", "tid", "name"):
            if k not in e:
                errs.append("event without %s: %s" % (k, e))
        if e.get("ph") == "M":
            if e["name"] == "thread_name":
                names.add((e["pid"], e["tid"]))
            if e["name"] == "process_name":
                procs.add(e["pid"])
            continue
        if e.get("ph") != "X":
            errs.append("unexpected ph %r" % e.get("ph"))
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, int) or not isinstance(dur, int) or dur < 0 or ts <= 0:
            errs.append("bad ts/dur: %s" % e)
            continue
        if e["name"] not in PHASES:
            errs.append("unknown phase %r" % e["name"])
        args = e.get("args", {})
        for k in ("job", "tensor", "ntensors", "bytes", "compressor", "policy", "seq"):
            if k not in args:
                errs.append("span without args.%s: %s" % (k, e))
        if "step" not in args and "collective" not in args:
            errs.append("span without step: %s" % e)
        if not args.get("tensor"):
            errs.append("span without a tensor name: %s" % e)
        if e["name"] == "communicate" and not args.get("bytes"):
            errs.append("communicate span with no bytes: %s" % e)
        lanes[(e["pid"], e["tid"])].append((ts, dur))
        jobs[args.get("job")].add(e["name"])
        if a.window and (ts < a.window[0] or ts + dur > a.window[1]):
            errs.append("span [%d, %d] outside the window %s" % (ts, ts + dur, a.window))
    nspans = collections.Counter()
    for (pid, tid), sp in lanes.items():
        nspans[pid] += len(sp)
        if (pid, tid) not in names:
            errs.append("lane %d/%d has no thread_name" % (pid, tid))
        for (t0, d0), (t1, _) in zip(sp, sp[1:]):
            if t1 < t0:
                errs.append("lane %d/%d: start %d after %d (not monotone)" % (pid, tid, t1, t0))
            elif t0 + d0 > t1:
                errs.append("lane %d/%d: spans overlap (%d+%d > %d)" % (pid, tid, t0, d0, t1))
    for pid in nspans:
        if pid not in procs:
            errs.append("pid %d has no process_name" % pid)
    for spec in a.job:
        name, phases = spec.split(":")
        missing = set(phases.split(",")) - jobs.get(name, set())
        if missing:
            errs.append("job %s lacks phases %s (has %s)" % (name, sorted(missing), sorted(jobs.get(name, set()))))
    od = doc.get("otherData", {})
    if a.pids is not None and sorted(nspans) != sorted(int(x) for x in a.pids.split(",")):
        errs.append("spans from daemons %s, expected %s" % (sorted(nspans), a.pids))
    if a.max_spans is not None:
        if any(n > a.max_spans for n in nspans.values()):
            errs.append("more than %d spans: %s" % (a.max_spans, dict(nspans)))
        if not od.get("truncated") or not od.get("dropped"):
            errs.append("not reported truncated: %s" % od)
    if a.spans_match and od.get("spans") != sum(nspans.values()):
        errs.append("otherData.spans %s but %d spans" % (od.get("spans"), sum(nspans.values())))
    if a.same_events:
        with open(a.same_events, encoding="utf-8") as f:
            other = json.load(f)["traceEvents"]
        if other != ev:
            errs.append("traceEvents differ from %s (%d vs %d events)" % (a.same_events, len(other), len(ev)))
    for e in errs[:20]:
        print("FAIL:", e)
    if errs:
        return 1
    print("timeline-check: %s: %d spans in %d lanes, daemons %s, jobs %s" % (
        a.file, sum(nspans.values()), len(lanes), sorted(nspans),
        {k: sorted(v) for k, v in jobs.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
