#!/usr/bin/env python3
"""bench/torch/cpuplan.py N [--per K] — disjoint CPU sets for N trainers and N daemons (run.sh --pin).

Prints one line per process, `trainer R CPULIST` and `daemon R CPULIST` (taskset's list format):
each gets whole physical cores (every SMT sibling of a core goes to the same process), drawn from
the cores local to GPU R where the system names them (/sys/bus/pci/devices/<GPU>/local_cpulist,
GPU bus ids from nvidia-smi), K cores each (default: as many as fit, at most 4). Why: a trainer
whose autograd thread shares a physical core with another process's spinning thread (a daemon's
hot loop, an NCCL proxy) runs its backward slower by an amount that changes with where the
scheduler happened to put the threads; pinned, every row of the benchmark (DDP's too) gets the
same cores. Exit 1 with the reason when the host has too few cores for N x 2 x 1.
"""
import argparse
import os
import subprocess
import sys


def parse_list(text):
    cpus = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def fmt_list(cpus):
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
        run = [c]
    if run:
        out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
    return ",".join(out)


def physical_cores(allowed):
    """[(package, core) key, sorted logical cpus] for the cpus this process may use."""
    cores = {}
    for c in sorted(allowed):
        top = "/sys/devices/system/cpu/cpu%d/topology/" % c
        try:
            with open(top + "physical_package_id") as f:
                pkg = int(f.read())
            with open(top + "core_id") as f:
                core = int(f.read())
        except (OSError, ValueError):
            pkg, core = 0, c
        cores.setdefault((pkg, core), []).append(c)
    return sorted(cores.values(), key=lambda cs: cs[0])


def gpu_local_cpus(n):
    """GPU r's local cpus (a set), or None where unknown."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return [None] * n
    res = []
    for r in range(n):
        local = None
        if r < len(out):
            bus = out[r].lower()
            # nvidia-smi prints an 8-digit domain (00000000:1B:00.0); sysfs uses 4 (0000:1b:00.0)
            if len(bus.split(":")[0]) == 8:
                bus = bus[4:]
            try:
                with open("/sys/bus/pci/devices/%s/local_cpulist" % bus) as f:
                    local = parse_list(f.read())
            except (OSError, ValueError):
                local = None
        res.append(local)
    return res


def plan(n, per, cores, local):
    """{('trainer'|'daemon', r): [cpus]}: trainer r then daemon r take `per` cores each, local
    cores of GPU r first."""
    free = list(cores)
    out = {}
    for r in range(n):
        for role in ("trainer", "daemon"):
            pick = []
            for want_local in (True, False):
                for cs in list(free):
                    if len(pick) == per:
                        break
                    is_local = local[r] is None or cs[0] in local[r]
                    if is_local == want_local:
                        pick.append(cs)
                        free.remove(cs)
            out[(role, r)] = sorted(c for cs in pick for c in cs)
    return out


def selftest():
    """plan() on made-up hosts: disjoint sets, siblings together, GPU-local cores first."""
    # 2 sockets x 4 cores x 2 threads: core c of socket s = cpus (4s + c, 8 + 4s + c)
    cores = [[4 * s + c, 8 + 4 * s + c] for s in range(2) for c in range(4)]
    p = plan(2, 2, cores, [set(range(0, 4)) | set(range(8, 12)), set(range(4, 8)) | set(range(12, 16))])
    want = {("trainer", 0): [0, 1, 8, 9], ("daemon", 0): [2, 3, 10, 11],
            ("trainer", 1): [4, 5, 12, 13], ("daemon", 1): [6, 7, 14, 15]}
    assert p == want, p
    # both GPUs on socket 0: rank 1 falls back to socket 1's cores
    p = plan(2, 1, cores, [set(range(0, 4)) | set(range(8, 12))] * 2)
    assert p[("trainer", 1)] == [2, 10] and p[("daemon", 1)] == [3, 11], p
    # one GPU on socket 1, 3 cores each: the daemon's third core comes from socket 0
    p = plan(1, 3, cores, [set(range(4, 8)) | set(range(12, 16))])
    assert p == {("trainer", 0): [4, 5, 6, 12, 13, 14], ("daemon", 0): [0, 1, 7, 8, 9, 15]}, p
    # no locality known, no SMT
    p = plan(1, 2, [[c] for c in range(6)], [None])
    assert p == {("trainer", 0): [0, 1], ("daemon", 0): [2, 3]}, p
    seen = [c for v in plan(2, 2, cores, [None, None]).values() for c in v]
    assert len(seen) == len(set(seen)) == 16
    assert parse_list("0-2,5,7-8\n") == {0, 1, 2, 5, 7, 8} and fmt_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    print("cpuplan selftest ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, nargs="?")
    ap.add_argument("--per", type=int, default=0, help="physical cores per process")
    ap.add_argument("--selftest", action="store_true", help="check the planner on made-up hosts")
    a = ap.parse_args()
    if a.selftest:
        return selftest()
    if a.n is None:
        ap.error("N (the number of ranks) is required")
    cores = physical_cores(os.sched_getaffinity(0))
    per = a.per or min(4, len(cores) // (2 * a.n))
    if a.n < 1 or per < 1 or per * 2 * a.n > len(cores):
        sys.exit("cpuplan: %d physical cores cannot give %d trainers and %d daemons %d each"
                 % (len(cores), a.n, a.n, max(per, 1)))
    p = plan(a.n, per, cores, gpu_local_cpus(a.n))
    for r in range(a.n):
        for role in ("trainer", "daemon"):
            print(role, r, fmt_list(p[(role, r)]))


if __name__ == "__main__":
    main()
