#!/usr/bin/env python3
"""bench/gpu/trace-split.py LOG... — where a traced submit->done goes, per segment (median, us).

Reads the daemons' `gtrace` lines (FGBUFF_GPU_TRACE=1, or =all for every single-tensor
collective) and the clients' `ctrace` lines (FGBUFF_CLIENT_TRACE=1) of one run, all stamped with
CLOCK_MONOTONIC us on one host, joins them by (rank, step) and prints the median of each segment
per rank, and the skew between the ranks' engine starts (the later launch is the critical one)."""
import re
import statistics
import sys
from collections import defaultdict

sub = re.compile(r"fgbuffd\[(\d+)\].*gtrace submit step (\d+) at (\d+) observed \+(\d+)")
eng = re.compile(r"fgbuffd\[(\d+)\].*gtrace engine step (\d+) start (\d+) agree \+(\d+) "
                 r"enqueue \+(\d+) signalled \+(\d+) fin \+(\d+)")
loop = re.compile(r"fgbuffd\[(\d+)\].*gtrace loop step (\d+) queued (\d+): taken \+(\d+)")
cli = re.compile(r"ctrace pid \d+ rank (\d+) tensor \d+ step (\d+) submit (\d+): sent \+(\d+)")
pre = re.compile(r"fgbuffd\[(\d+)\].*gtrace preissue step (\d+) seq \d+ at (\d+)")

rec = defaultdict(dict)
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        for rx, kind in ((sub, "sub"), (eng, "eng"), (loop, "loop"), (cli, "cli"), (pre, "pre")):
            m = rx.search(line)
            if m:
                g = [int(x) for x in m.groups()]
                rec[(g[0], g[1])][kind] = g[2:]
                break

seg = defaultdict(list)
starts = defaultdict(dict)
for (rank, step), r in rec.items():
    if "eng" in r:
        starts[step][rank] = r["eng"][0]
    if not all(k in r for k in ("cli", "sub", "loop", "eng")):
        continue
    t0, sent = r["cli"]
    arrived, obs = r["sub"]
    queued, taken = r["loop"]
    start, agree, enq, sig, fin = r["eng"]
    seg[rank, "client submit -> daemon has it"].append(arrived - t0)
    seg[rank, "-> readiness seen"].append(obs)
    seg[rank, "-> engine item queued (agreement)"].append(queued - arrived - obs)
    seg[rank, "-> engine takes it"].append(start - queued)
    seg[rank, "-> settings agreed"].append(agree)
    seg[rank, "-> NCCL enqueued"].append(enq - agree)
    seg[rank, "-> done signal + fin event"].append(sig - enq)
    seg[rank, "-> engine sees completion"].append(fin - sig)
    seg[rank, "client submit -> engine start"].append(start - t0)
    if "pre" in r:  # a pre-issued step: when its ISSUE arrived, against the client's submit
        seg[rank, "(pre-issued: ISSUE arrived, vs submit)"].append(r["pre"][0] - t0)
skew = [abs(v[1] - v[0]) for v in starts.values() if len(v) == 2]
for key in sorted(seg, key=lambda k: k[0]):
    v = seg[key]
    print(f"rank {key[0]} {key[1]:<40} p50 {statistics.median(v):7.1f}  (n={len(v)})")
if skew:
    print(f"engine start skew between ranks          p50 {statistics.median(skew):7.1f}  (n={len(skew)})")
