#!/usr/bin/env python3
"""One rank of a two-rank job whose overlap of synchronisation with "compute" is known, for the
hidden-share checks of fgbuffctl top (tests/ops/test-top.sh). Two host tensors A and B, policy
none (each synchronised on its own as soon as both ranks submitted it), STEPS steps:

  gap:   rank 0 submits A, sleeps GAP ms, submits B; rank 1 sleeps GAP/2, submits A, sleeps
         GAP/2, submits B. On rank 0 A's sync waits GAP/2 for rank 1, all of it before B (the
         step's last tensor) is ready: hidden; B's is short: most of rank 0's sync time is hidden.
  burst: both ranks submit A and B back to back, then wait: nothing runs before the last
         submit, so almost all sync time is exposed.

Usage: overlap-client.py RANK MODE STEPS GAP_MS  (FGBUFF_JOB, FGBUFF_INCARNATION, the daemon of
local index RANK through FGBUFF_LOCAL_INDEX / FGBUFF_RUNTIME_DIR)."""
import os
import sys
import time

from fgbuff.client import Client

rank, mode, steps, gap = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]) / 1e3
c = Client()
c.join(os.environ["FGBUFF_JOB"], int(os.environ.get("FGBUFF_INCARNATION", "0")), rank, 2,
       policy="none")
n = 4096
arena = c.arena_alloc_host(2 * 4 * n)
a = c.tensor_register("A", arena, 0, n)
b = c.tensor_register("B", arena, 4 * n, n)
for s in range(1, steps + 1):
    if mode == "gap":
        if rank == 1:
            time.sleep(gap / 2)
        c.submit(a, s)
        time.sleep(gap if rank == 0 else gap / 2)
        c.submit(b, s)
    else:
        c.submit(a, s)
        c.submit(b, s)
    c.wait(a, s)
    c.wait(b, s)
print(f"rank {rank} {mode}: {steps} steps done", flush=True)
c.close()
