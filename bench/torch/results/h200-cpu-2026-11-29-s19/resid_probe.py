import os, time, numpy as np, fgbuff
from fgbuff import client as C

def test_resid(world):
    rank, size = world
    cl = C.Client()
    cl.join(name="resid", policy=os.environ.get("POL", "fgbuff"))
    N, n = 24, 20000
    ar = cl.arena_alloc_host(N * n * 4)
    buf = np.frombuffer(ar.view(), dtype=np.float32)
    ids = [cl.tensor_register(f"t{i}", ar, i * n * 4, n, compressor="topk" if i % 2 == 0 else None, density=0.01 if i % 2 == 0 else 0.0) for i in range(N)]
    cum_in = np.zeros(N * n, np.float64); cum_out = np.zeros(N * n, np.float64)
    for step in range(1, 31):
        g = np.random.default_rng(step).standard_normal(N * n).astype(np.float32)
        buf[:] = g
        cum_in += g
        for t in reversed(ids):
            time.sleep(0.002)
            cl.submit(t, step)
        cl.end_step(step)
        cl.wait_step(step)
        out = buf.astype(np.float64)
        cum_out += out
        held = [float(np.abs(cum_in[i*n:(i+1)*n] - cum_out[i*n:(i+1)*n]).max()) for i in range(N)]
        exact = [bool(np.allclose(out[i*n:(i+1)*n], g[i*n:(i+1)*n])) for i in range(N)]
        nz = [int(np.count_nonzero(out[i*n:(i+1)*n])) for i in range(N)]
        if rank == 0:
            print(f"step {step}: nz {nz[:4]} exact {sum(exact)}/{N} held max {max(held):.3f}", flush=True)
    if rank == 0:
        print(cl.status_text("resid")[:1500])
