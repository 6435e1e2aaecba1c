#!/usr/bin/env python3
"""bench/trace/timeline.py — the per-collective timeline of one replayed step, raw NCCL per
tensor, raw NCCL in DDP's buckets and fgbuffd side by side (issue 16), from one run.sh --timeline
folder (or run.sh --keep with the replays run with --timeline):

  o.<trace>-<policy>-<comp>-<net>.<rank>  the replay's stdout: "rtrace" lines (replay.c, raw.c)
  e.<...>.<rank>                          its stderr: the client's "ctrace" lines
  daemons-<net>.log                       both daemons' log: "gtrace" lines (FGBUFF_GPU_TRACE=all)

All times are CLOCK_MONOTONIC on one host; printed in ms from the step's origin (start of
backward) on each rank. For each run the step shown is the measured step with the median iteration
(or --step N). Per collective:
  raw, raw-bucketed (raw.c, CUDA events placed on the host clock by the step's origin event):
    ready  the compute stream passed the tensor's (bucket's last member's) ready spin (and copy)
    issue  the host called ncclAllReduce (the raw runs enqueue the whole step up front)
    start  the communication stream reached the collective (after the previous one and ready)
    end    the all-reduce finished on the GPU; done: copies back (bucketed) finished
    gap    start - the previous collective's end (GPU idle on the communication stream)
    late   start - max(ready, the previous collective's end): what the start lost that neither
           readiness nor the previous collective explains (launch, daemon, host wake-ups)
  fgbuffd (policy of the run): the daemon's lines, matched to tensors BY ORDER within the step
  (the n-th single-tensor item of the step on a rank is the n-th tensor in ISSUE order; for policy
  none that is the trace's ready order; the gtrace lines carry no tensor id):
    ready  the traced ready time on the replay's GPU stream (t0 + ready_us)
    seen   "gtrace submit ... observed": the daemon saw the client's ready event
    issue  "gtrace engine ... start" (the engine began the item), enq: NCCL enqueued
    start/end  ESTIMATED (the daemon logs GPU durations, not GPU times): end = max(agree,
           previous end) + the GPU "collective" time (its first event is recorded at agree,
           so it includes waiting behind earlier collectives on the daemon's stream);
           CPU daemons: the loop line's taken/fin (host times; the engine runs one at a time)
    done   measured: the replay's probe stream saw the tensor's result (GPU, placed on the host
           clock by the step's origin event; in ready order, so exact where results complete in
           that order, as under none); CPU: the host saw the Done during the forward
    fin    the engine saw completion (host), sent: the Done left the daemon
Only single-tensor items are logged by the daemons (gtrace); buffers of fusion or static plans and
DeAR's split halves are not (README, "Timeline").

Usage: timeline.py --dir DIR [--trace-index 0] [--net slow] [--rank 0] [--step N]
                   [--chrome FILE.json] [--rows N]
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

RT = re.compile(r"^rtrace rank (\d+) mode (\S+) step (\d+) (.*)$")
KV = re.compile(r"(\w+) (\S+)")
ENG = re.compile(r"fgbuffd\[(\d+)\].*gtrace engine step (\d+) start (\d+) agree \+(\d+) "
                 r"enqueue \+(\d+) signalled \+(\d+) fin \+(\d+) us; GPU: collective ([\d.]+), "
                 r"scale ([\d.]+), done events ([\d.]+)")
LOOP = re.compile(r"fgbuffd\[(\d+)\].*gtrace loop step (\d+) queued (\d+): taken \+(\d+) "
                  r"started \+(\d+) fin \+(\d+) delivered \+(\d+) loop \+(\d+) done-sent \+(\d+)")
SUB = re.compile(r"fgbuffd\[(\d+)\].*gtrace submit step (\d+) at (\d+) observed \+(\d+)")
CTR = re.compile(r"ctrace pid \d+ rank (\d+) tensor (\d+) step (\d+) submit (\d+): sent \+(-?\d+) "
                 r"done-read \+(-?\d+) stream-waits \+(-?\d+) us \((.*)\)")


def kv(rest):
    """'a 1 b x' -> {'a': '1', 'b': 'x'} (the rtrace lines are key value pairs)."""
    toks = rest.split()
    return {toks[i]: toks[i + 1] for i in range(0, len(toks) - 1, 2)}


def load_run(path):
    """One replay's stdout: {step: {'head': {...}, 'coll': [...], 'tensor': [...], 'layer': [...]}}
    and the mode."""
    steps, mode = {}, None
    for line in open(path, errors="replace"):
        m = RT.match(line.strip())
        if not m:
            continue
        rank, mode, step, d = int(m.group(1)), m.group(2), int(m.group(3)), kv(m.group(4))
        st = steps.setdefault(step, {"head": None, "coll": [], "tensor": [], "layer": [],
                                     "rank": rank})
        for kind in ("coll", "tensor", "layer"):
            if kind in d:
                st[kind].append(d)
                break
        else:
            st["head"] = d
    return mode, steps


def f(d, k):
    return float(d.get(k, 0) or 0)


def pick_step(steps, want):
    if want is not None:
        return want if want in steps else None
    meas = [(f(s["head"], "fwd_end_us") - f(s["head"], "origin_us")
             if f(s["head"], "fwd_end_us") else f(s["head"], "sync_end_us") - f(s["head"], "origin_us"), k)
            for k, s in steps.items() if s["head"] and s["head"].get("measured") == "1"]
    if not meas:
        return None
    meas.sort()
    return meas[len(meas) // 2][1]


def load_daemon(path):
    """gtrace lines per rank: engine, loop, submit (lists of dicts, in log order)."""
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path, errors="replace"):
        if "gtrace" not in line:
            continue
        for rx, kind in ((ENG, "eng"), (LOOP, "loop"), (SUB, "sub")):
            m = rx.search(line)
            if m:
                g = m.groups()
                r = out.setdefault(int(g[0]), {"eng": [], "loop": [], "sub": []})
                if kind == "eng":
                    r["eng"].append({"step": int(g[1]), "start": int(g[2]), "agree": int(g[3]),
                                     "enq": int(g[4]), "sig": int(g[5]), "fin": int(g[6]),
                                     "coll": float(g[7]), "scale": float(g[8]), "done": float(g[9])})
                elif kind == "loop":
                    q, started, fin = int(g[2]), int(g[4]), int(g[5])
                    if started > fin:  # not stamped (CPU daemons): the engine took it then
                        started = int(g[3])
                    r["loop"].append({"step": int(g[1]), "queued": q, "taken": q + int(g[3]),
                                      "started": q + started, "fin": q + fin,
                                      "sent": q + int(g[8])})
                else:
                    r["sub"].append({"step": int(g[1]), "at": int(g[2]),
                                     "seen": int(g[2]) + int(g[3])})
                break
    return out


def raw_rows(st, t0):
    rows, prev_end = [], None
    for c in st["coll"]:
        start, end = f(c, "start_us"), f(c, "end_us")
        rows.append({"what": "%s%s" % (c["name"], "" if c["count"] == "1" else " +%d" %
                                       (int(c["count"]) - 1)),
                     "bytes": int(c["bytes"]), "ready": f(c, "ready_us") - t0,
                     "issue": f(c, "issue_us") - t0, "start": start - t0, "end": end - t0,
                     "done": f(c, "done_us") - t0,
                     "gap": None if prev_end is None else start - prev_end,
                     "late": start - max(f(c, "ready_us"), prev_end or 0)})
        prev_end = end
    return rows


def fgb_rows(st, t0, dm, rank, lo, hi):
    """The fgbuffd run's collectives on `rank` in [lo, hi] (host us), matched by order."""
    d = dm.get(rank, {"eng": [], "loop": [], "sub": []})
    step = int(st["head"].get("_step", -1))
    # Engine lines come at completion, loop lines at delivery: both in issue order once sorted.
    eng = sorted((e for e in d["eng"] if e["step"] == step and lo <= e["start"] <= hi),
                 key=lambda e: e["start"])
    loop = sorted((e for e in d["loop"] if e["step"] == step and lo <= e["queued"] <= hi),
                  key=lambda e: e["queued"])
    sub = [e for e in d["sub"] if e["step"] == step and lo <= e["at"] <= hi]
    tens = st["tensor"]
    rows, prev_end = [], None
    n = max(len(eng), len(loop))
    for k in range(n):
        e = eng[k] if k < len(eng) else None
        lp = loop[k] if k < len(loop) else None
        t = tens[k] if k < len(tens) else {}
        r = {"what": t.get("name", "?"), "bytes": int(t.get("bytes", 0) or 0),
             "ready": f(t, "ready_us") - t0 if t else None,
             "seen": sub[k]["seen"] - t0 if k < len(sub) else None,
             "done": f(t, "done_us") - t0 if f(t, "done_us") > 0 else None}
        if e:
            agree = e["start"] + e["agree"]
            start = max(agree, prev_end) if prev_end is not None else agree
            end = start + e["coll"]
            r.update({"issue": e["start"] - t0, "enq": e["start"] + e["enq"] - t0,
                      "start": start - t0, "end": end - t0, "fin": e["start"] + e["fin"] - t0,
                      "est": True})
        elif lp:
            start, end = lp["started"], lp["fin"]
            r.update({"issue": lp["taken"] - t0, "enq": None, "start": start - t0,
                      "end": end - t0, "fin": lp["fin"] - t0, "est": False})
        r["sent"] = lp["sent"] - t0 if lp else None
        r["gap"] = None if prev_end is None else start - prev_end
        r["late"] = (start - t0 - max(r["ready"], (prev_end - t0) if prev_end is not None else 0)
                     if r["ready"] is not None else None)
        prev_end = end
        rows.append(r)
    return rows, len(eng), len(loop)


def ms(v):
    return "%8.3f" % (v / 1e3) if v is not None else "%8s" % "-"


def summary(name, st, rows, t0):
    """busy: the union of the collectives' [start, end] (CPU daemons overlap them); gaps: the idle
    time inside [first start, last end], and how many idle stretches exceed 50 us."""
    h = st["head"]
    iv = sorted((r["start"], r["end"]) for r in rows if r.get("start") is not None)
    busy, idle, nidle, cur = 0.0, 0.0, 0, None
    for a, b in iv:
        if cur is None or a > cur[1]:
            if cur is not None:
                idle += a - cur[1]
                nidle += a - cur[1] > 50
                busy += cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    if cur is not None:
        busy += cur[1] - cur[0]
    first = iv[0][0] if iv else None
    last = max((b for _, b in iv), default=None)
    late = [r["late"] for r in rows if r.get("late") is not None]
    return [name, len(rows), ms(first), ms(last), ms(busy), ms(idle), nidle,
            ms(sum(x for x in late if x > 0)),
            ms(f(h, "bwd_end_us") - t0),
            ms(f(h, "sync_end_us") - t0),
            ms(f(h, "fwd_end_us") - t0) if f(h, "fwd_end_us") else ms(None)]


def chrome_events(name, pid, st, rows, t0, rank):
    ev = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}]
    for r in rows:
        if r.get("start") is None:
            continue
        ev.append({"name": r["what"], "ph": "X", "pid": pid, "tid": "rank %d comm" % rank,
                   "ts": r["start"], "dur": max(r["end"] - r["start"], 0.1),
                   "args": {k: v for k, v in r.items() if k not in ("what",)}})
        if r.get("ready") is not None:
            ev.append({"name": "ready " + r["what"], "ph": "i", "s": "t", "pid": pid,
                       "tid": "rank %d ready" % rank, "ts": r["ready"]})
    for l in st["layer"]:
        ev.append({"name": "fwd " + l["name"], "ph": "X", "pid": pid,
                   "tid": "rank %d forward" % rank, "ts": f(l, "begin_us") - t0,
                   "dur": f(l, "fwd_us")})
    h = st["head"]
    ev.append({"name": "backward", "ph": "X", "pid": pid, "tid": "rank %d forward" % rank,
               "ts": 0, "dur": f(h, "bwd_end_us") - t0})
    return ev


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--trace-index", default="0")
    ap.add_argument("--net", default=None, help="network label (default: the first found)")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--rows", type=int, default=0, help="collectives printed per run (0: all)")
    ap.add_argument("--chrome", help="write a Chrome trace (chrome://tracing, Perfetto)")
    a = ap.parse_args()
    outs = sorted(glob.glob(os.path.join(a.dir, "o.%s-*.%d" % (a.trace_index, a.rank))))
    runs = []
    for p in outs:
        key = os.path.basename(p)[2:-2]  # <ti>-<pol>-<comp>-<net>
        ti, rest = key.split("-", 1)
        pol, comp, net = rest.rsplit("-", 2)
        if a.net and net != a.net:
            continue
        a.net = a.net or net
        mode, steps = load_run(p)
        if mode:
            runs.append((pol, comp, mode, steps))
    if not runs:
        sys.exit("timeline.py: no rtrace lines in %s for trace %s, rank %d (run.sh --timeline)" %
                 (a.dir, a.trace_index, a.rank))
    dm = load_daemon(os.path.join(a.dir, "daemons-%s.log" % a.net))
    order = {"raw": 0, "raw-bucketed": 1}
    runs.sort(key=lambda r: (order.get(r[2], 2), r[0], r[1]))
    summ, chrome, per_tensor = [], [], {}
    for pid, (pol, comp, mode, steps) in enumerate(runs):
        step = pick_step(steps, a.step)
        if step is None:
            print("%s %s: no measured step with rtrace lines" % (pol, comp))
            continue
        st = steps[step]
        st["head"]["_step"] = str(step)
        t0 = f(st["head"], "origin_us")
        name = "%s %s" % (pol, comp) if mode == "fgbuffd" else mode
        if mode == "fgbuffd":
            hi = max(f(st["head"], "sync_end_us"), f(st["head"], "fwd_end_us")) + 2000
            rows, ne, nl = fgb_rows(st, t0, dm, a.rank, t0 - 1000, hi)
            note = ("%d engine lines, %d loop lines for step %d on rank %d (%d tensors)" %
                    (ne, nl, step, a.rank, len(st["tensor"])))
            if not rows:
                note += ": no single-tensor items logged (daemons without FGBUFF_GPU_TRACE=all, "
                note += "or the policy runs buffers)"
        else:
            rows = raw_rows(st, t0)
            note = "%d collectives" % len(rows)
        print("\n== %s, network %s, rank %d, step %d (origin %.0f us): %s" %
              (name, a.net, a.rank, step, t0, note))
        if mode == "fgbuffd":
            print("%4s %-36s %10s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s" %
                  ("#", "tensor (by order)", "bytes", "ready", "seen", "issue", "enq",
                   "start~", "end~", "gap~", "late~", "done", "fin", "sent"))
            for k, r in enumerate(rows[:a.rows or None]):
                print("%4d %-36.36s %10d %s %s %s %s %s %s %s %s %s %s %s" %
                      (k, r["what"], r["bytes"], ms(r["ready"]), ms(r["seen"]), ms(r["issue"]),
                       ms(r.get("enq")), ms(r["start"]), ms(r["end"]), ms(r["gap"]),
                       ms(r["late"]), ms(r["done"]), ms(r["fin"]), ms(r["sent"])))
        else:
            print("%4s %-40s %10s %8s %8s %8s %8s %8s %8s %8s" %
                  ("#", "tensor / bucket (last member +others)", "bytes", "ready", "issue",
                   "start", "end", "gap", "late", "done"))
            for k, r in enumerate(rows[:a.rows or None]):
                print("%4d %-40.40s %10d %s %s %s %s %s %s %s" %
                      (k, r["what"], r["bytes"], ms(r["ready"]), ms(r["issue"]), ms(r["start"]),
                       ms(r["end"]), ms(r["gap"]), ms(r["late"]), ms(r["done"])))
        if mode in ("raw", "fgbuffd"):
            per_tensor[name] = rows
        summ.append(summary(name, st, rows, t0))
        chrome += chrome_events("%s (step %d)" % (name, step), pid, st, rows, t0, a.rank)
    if len(per_tensor) > 1:
        names = list(per_tensor)
        n = max(len(v) for v in per_tensor.values())
        print("\n== side by side, per tensor (ms from each run's origin): start / end / late; "
              "end is measured (raw: the all-reduce's end event; fgbuffd: its result visible to "
              "the replay's probe stream, else the estimate ~)")
        print("%4s %-36s" % ("#", "tensor") + "".join(" | %-27.27s" % x for x in names))
        for k in range(n if not a.rows else min(n, a.rows)):
            w = next((v[k]["what"] for v in per_tensor.values() if k < len(v)), "?")
            cells = []
            for x in names:
                r = per_tensor[x][k] if k < len(per_tensor[x]) else None
                if not r or r.get("start") is None:
                    cells.append(" | %27s" % "-")
                    continue
                measured = r.get("done") is not None and "seen" in r  # fgbuffd, probed
                end = r["done"] if measured else r["end"]
                cells.append(" | %s %s%s %s" % (ms(r["start"]), ms(end),
                                                "~" if not measured and r.get("est") else " ",
                                                ms(r["late"])))
            print("%4d %-36.36s" % (k, w) + "".join(cells))
    print("\n== summary (ms from each run's origin; busy: union of the collectives; gaps: idle "
          "inside it, and stretches > 50 us; late: sum of the positive lates)")
    print("%-22s %6s %8s %8s %8s %8s %7s %8s %8s %8s %8s" %
          ("run", "colls", "1st start", "last end", "busy", "gaps", ">50us", "late", "bwd end",
           "sync end", "fwd end"))
    for s in summ:
        print("%-22s %6d %8s %8s %8s %8s %7d %8s %8s %8s %8s" % tuple(s))
    if a.chrome:
        with open(a.chrome, "w") as fp:
            json.dump({"traceEvents": chrome, "displayTimeUnit": "ms"}, fp)
        print("wrote %s (%d events)" % (a.chrome, len(chrome)))


if __name__ == "__main__":
    main()
