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
dump instead: its steps, and the medians of colls, busy, gaps, comp and end over them.

--beside TIMELINE.csv (a trainer's steps on the same clock: bench/torch's --timeline file, rank 0)
prints instead, per step of the trainer, how much of its window from the step's start to its last
gradient (forward and backward compute) the daemon had work in flight on the GPU beside it, of
any job: `coll` the collectives (communicate spans), `comp` the compressor (encode and decode),
`any` either, as percentages of the window, and their medians. Under MPS anything resident
beside a training step slows it (docs/performance.md, "Session 27"). With --medians, for any
number of timelines (the dump read once), one line per timeline instead: its path and the three
medians ("n/a" where none of its steps was recorded). Usage:
  spans.py DUMP.json[.gz] [--rank R] [--job SUBSTRING] [--from STEP]
           [--beside TIMELINE.csv [--medians] | --beside --medians TIMELINE.csv...]
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
    ap.add_argument("--beside", nargs="+", default=None, metavar="TIMELINE.csv")
    ap.add_argument("--medians", action="store_true")
    a = ap.parse_args(argv)
    ev = [e for e in load(a.dump) if e.get("pid") == a.rank]
    if not ev:
        print(f"spans.py: no spans of daemon {a.rank} in {a.dump}", file=sys.stderr)
        return 1
    if a.beside and a.medians:
        return beside_medians(ev, a.beside)
    if a.beside:
        if len(a.beside) > 1:
            print("spans.py: several --beside timelines need --medians", file=sys.stderr)
            return 2
        return beside(ev, a.rank, a.beside[0])
    if a.medians:
        print("spans.py: --medians is for --beside", file=sys.stderr)
        return 2
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


def trainer_windows(path):
    """(step, start_us, last_grad_us) of each step of a bench/torch timeline CSV."""
    out = []
    with open(path) as f:
        lines = [ln for ln in f if ln.strip() and not ln.startswith("#")]
    if not lines or not lines[0].startswith("step,start_us,last_grad_us"):
        raise ValueError(f"{path}: not a bench/torch timeline (want a header "
                         "step,start_us,last_grad_us,...)")
    for n, ln in enumerate(lines[1:], 2):
        f = ln.strip().split(",")
        try:
            step, s0, lg = int(f[0]), int(f[1]), int(f[2])
        except (ValueError, IndexError):
            raise ValueError(f"{path}: data line {n}: not step,start_us,last_grad_us: {ln.strip()}")
        if lg > s0:
            out.append((step, s0, lg))
    return out


def in_flight(ev, names, s0, s1):
    """Microseconds of [s0, s1] covered by the spans named in names."""
    iv = sorted((max(e["ts"], s0), min(e["ts"] + e["dur"], s1)) for e in ev
                if e["name"] in names and e["ts"] < s1 and e["ts"] + e["dur"] > s0)
    return union(iv)[0]


BESIDE_KINDS = (("coll", {"communicate"}), ("comp", {"compress", "decompress"}),
                ("any", {"communicate", "compress", "decompress"}))


def beside_rows(ev, path):
    """Per step of the timeline at path: (step, window ms, [coll, comp, any] % or None where the
    step comes after the dump's last span: the dump keeps its first FGBUFF_TIMELINE_SPANS spans,
    so such a window has no record, not "nothing in flight"). Raises ValueError (OSError) for a
    timeline it cannot read or one without steps."""
    wins = trainer_windows(path)
    if not wins:
        raise ValueError(f"no steps in {path}")
    last = max(e["ts"] + e["dur"] for e in ev)
    return [(step, (lg - s0) / 1e3,
             None if s0 > last else
             [100.0 * in_flight(ev, names, s0, lg) / (lg - s0) for _, names in BESIDE_KINDS])
            for step, s0, lg in wins]


def medians(rows):
    """The medians of coll, comp and any over the recorded steps of beside_rows, or None."""
    got = [r for _, _, r in rows if r is not None]
    return [statistics.median(r[i] for r in got) for i in range(3)] if got else None


def beside(ev, rank, path):
    try:
        rows = beside_rows(ev, path)
    except (OSError, ValueError) as e:
        print(f"spans.py: --beside: {e}", file=sys.stderr)
        return 1
    print(f"daemon {rank} beside the trainer's steps of {path}: % of each step's start to last "
          "gradient with daemon work in flight on the GPU")
    print(f"{'step':>5} {'window':>8} {'coll':>6} {'comp':>6} {'any':>6}")
    for step, win, r in rows:
        vals = [f"{v:>6.1f}" for v in r] if r is not None else [f"{'n/a':>6}"] * 3
        print(f"{step:>5} {win:>8.2f} " + " ".join(vals))
    med = medians(rows)
    if med is None:
        print("spans.py: --beside: every step comes after the dump's last span (not recorded)",
              file=sys.stderr)
        return 1
    print(f"{'median':>5} {'':>8} " + " ".join(f"{v:>6.1f}" for v in med))
    return 0


def beside_medians(ev, paths):
    """One line per timeline: its path and the medians of coll, comp and any (n/a: none)."""
    for path in paths:
        try:
            med = medians(beside_rows(ev, path))
        except (OSError, ValueError) as e:
            print(f"spans.py: --beside: {e}", file=sys.stderr)
            med = None
        print(path, *(f"{v:.1f}" for v in med) if med else ["n/a"] * 3)
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
