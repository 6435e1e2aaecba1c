#!/usr/bin/env python3
"""bench/trace/spans.py — the link's use per step, from the daemons' own timeline (run.sh --spans,
or any `fgbuffctl timeline dump`): where a merged plan's step goes, collective by collective.

The dump holds a process per daemon and, per buffer and step, a "wait" span (host clock: from
readiness seen to the item's start), a "communicate" span (GPU events on GPU daemons: the buffer's
collective, its pack copies included) and a "write-back" span (average and copy back), plus
compress/decompress for compressed members. For every step of one job on one daemon it prints:

  colls   the step's collectives (communicate spans)
  first   the first collective's start, ms from the step's first span (its first wait)
  busy    the union of the collectives (ms the link was in use)
  gaps    idle time inside that union's first start and last end (ms)
  comp    the union of the compressed members' encode and decode spans (ms the compressor ran on
          the device: on a GPU daemon what competes with a trainer's kernels beside it)
  end     the step's last span's end (ms)
  durs    the first collectives' durations (ms), in start order

and a last line with the medians over the steps shown. Without --job, one line per job of the
dump instead: its steps, and the medians of colls, busy, gaps, comp and end over them. Usage:
  spans.py DUMP.json[.gz] [--rank R] [--job SUBSTRING] [--from STEP]
(--rank: the daemon, by its process index in the dump, default 0; --job: the job whose name
contains it, the one with the most spans if several do; --from: steps from this one on, default all).
"""
import argparse
import collections
import gzip
import json
import statistics
import sys


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        doc = json.load(f)
    return [e for e in doc.get("traceEvents", []) if e.get("ph") == "X" and "args" in e]


def union(spans):
    """(busy, gaps) of sorted (start, end) intervals."""
    busy = gaps = 0.0
    cur_s = cur_e = None
    for s, e in spans:
        if cur_e is None:
            cur_s, cur_e = s, e
        elif s > cur_e:
            busy += cur_e - cur_s
            gaps += s - cur_e
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    return busy, gaps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--job", default="")
    ap.add_argument("--from", dest="first", type=int, default=0)
    a = ap.parse_args(argv)
    ev = [e for e in load(a.dump) if e.get("pid") == a.rank]
    if not ev:
        print(f"spans.py: no spans of daemon {a.rank} in {a.dump}", file=sys.stderr)
        return 1
    jobs = collections.Counter(e["args"].get("job", "") for e in ev)
    if not a.job:
        print(f"daemon {a.rank}: medians over each job's steps from {a.first} (ms from each step's "
              "first span)")
        print(f"{'job':<36} {'steps':>5} {'colls':>5} {'busy':>8} {'gaps':>7} {'comp':>7} "
              f"{'end':>8}")
        for job in sorted(jobs):
            rows = step_rows(ev, job, a.first)
            if rows:
                med = [statistics.median(r[i] for r in rows) for i in (1, 2, 3, 7, 4)]
                print(f"{job:<36} {len(rows):>5} {med[0]:>5.0f} {med[1]:>8.2f} {med[2]:>7.2f} "
                      f"{med[3]:>7.2f} {med[4]:>8.2f}")
        return 0
    job = next((j for j, _ in jobs.most_common() if a.job in j), None)
    if job is None:
        print(f"spans.py: no job matching '{a.job}' (jobs: {', '.join(jobs)})", file=sys.stderr)
        return 1
    rows = step_rows(ev, job, a.first)
    print(f"daemon {a.rank}, job {job}: {len(rows)} steps with collectives (ms from each step's "
          "first span)")
    print(f"{'step':>5} {'colls':>5} {'first':>7} {'busy':>8} {'gaps':>7} {'comp':>7} {'end':>8}"
          "  durs")
    for s, n, busy, gaps, end, first, durs, comp in rows:
        print(f"{s:>5} {n:>5} {first:>7.2f} {busy:>8.2f} {gaps:>7.2f} {comp:>7.2f} {end:>8.2f}  "
              + " ".join(f"{d:.2f}" for d in durs[:6]) + (" ..." if len(durs) > 6 else ""))
    if not rows:
        print("spans.py: no collectives in these steps", file=sys.stderr)
        return 1
    med = [statistics.median(r[i] for r in rows) for i in (2, 3, 7, 4)]
    print(f"{'median':>5} {'':>5} {'':>7} {med[0]:>8.2f} {med[1]:>7.2f} {med[2]:>7.2f} "
          f"{med[3]:>8.2f}")
    return 0


def step_rows(ev, job, first_step):
    """Per step of `job` with collectives: (step, colls, busy, gaps, end, first, durations, comp),
    ms."""
    steps = collections.defaultdict(list)
    for e in ev:
        if e["args"].get("job") == job and e["args"].get("step", -1) >= first_step:
            steps[e["args"]["step"]].append(e)
    rows = []
    for s in sorted(steps):
        es = steps[s]
        t0 = min(e["ts"] for e in es)
        comm = sorted((e["ts"], e["ts"] + e["dur"]) for e in es if e["name"] == "communicate")
        if not comm:
            continue
        busy, gaps = union(comm)
        comp, _ = union(sorted((e["ts"], e["ts"] + e["dur"]) for e in es
                               if e["name"] in ("compress", "decompress")))
        end = max(e["ts"] + e["dur"] for e in es) - t0
        rows.append((s, len(comm), busy / 1e3, gaps / 1e3, end / 1e3, (comm[0][0] - t0) / 1e3,
                     [(e - b) / 1e3 for b, e in comm], comp / 1e3))
    return rows


if __name__ == "__main__":
    sys.exit(main())
