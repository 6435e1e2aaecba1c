"""Tier 0, torch-free: fgbuff.client against a CPU world of daemons, one process per rank.
Exact allreduce/broadcast/allgather, the daemon's error text in exceptions, compressor state
larger than a frame resumed bitwise in a fresh job, a dead peer raising within 10 s (last: it ends
rank 1)."""

import os
import struct
import sys
import time
from array import array

import pytest

from fgbuff import client as C

TO = 60000


@pytest.fixture(scope="module")
def job(world):
    c = C.Client()
    c.join(name="tier0")
    yield c
    c.close()


def test_job_rank_matches_launcher(job, world):
    assert job.job_rank() == world
    assert "torch" not in sys.modules  # tier 0 stays torch-free


def _f64(view, n):
    return list(struct.unpack(f"{n}d", bytes(view[: 8 * n])))


def test_allreduce_broadcast_allgather_exact(job, world):
    r, n = world
    a = job.arena_alloc_host(1 << 16)
    v = a.view()
    cnt = 5
    t = job.tensor_register("ar", a, 0, cnt, C.FLOAT64, (cnt,))
    v[: 8 * cnt] = struct.pack(f"{cnt}d", *[r * 10.0 + i + 0.25 for i in range(cnt)])
    job.allreduce(t, C.OP_SUM, TO)
    assert _f64(v, cnt) == [sum(q * 10.0 + i + 0.25 for q in range(n)) for i in range(cnt)]
    v[: 8 * cnt] = struct.pack(f"{cnt}d", *[r * 10.0 + i for i in range(cnt)])
    job.allreduce(t, C.OP_AVERAGE, TO)
    assert _f64(v, cnt) == [sum(q * 10.0 + i for q in range(n)) / n for i in range(cnt)]
    # int64 broadcast from the last rank
    b = job.tensor_register("bc", a, 1024, 3, C.INT64, (3,))
    v[1024:1048] = struct.pack("3q", r, -r, 1 << 40)
    job.broadcast(b, n - 1, TO)
    assert struct.unpack("3q", bytes(v[1024:1048])) == (n - 1, -(n - 1), 1 << 40)
    # uint8 allgather in rank order
    s = job.tensor_register("gs", a, 2048, 4, C.UINT8, (4,))
    d = job.tensor_register("gd", a, 4096, 4 * n, C.UINT8, (4 * n,))
    v[2048:2052] = bytes([r, r + 1, 255 - r, 7])
    job.allgather(s, d, TO)
    assert bytes(v[4096:4096 + 4 * n]) == b"".join(bytes([q, q + 1, 255 - q, 7]) for q in range(n))


def test_errors_carry_the_daemons_text(job):
    a = job.arena_alloc_host(4096)
    with pytest.raises(C.InvalidArgument) as e:
        job.tensor_register("too-long", a, 4000, 1000, C.FLOAT32)
    assert e.value.status == C.EINVAL
    assert "too-long" in str(e.value) and "run past" in str(e.value)
    with pytest.raises(C.NotFound):
        job.allreduce(987654, C.OP_SUM, TO)
    with pytest.raises(C.InvalidArgument) as e:
        job.tensor_register("badcomp", a, 0, 16, C.FLOAT32, (16,), compressor="no-such-comp")
    assert "no-such-comp" in str(e.value)
    assert job.status_json()["device"] == "cpu"
    assert "tier0" in job.status_text()


def test_status_and_metrics_select_jobs(job, world):
    """status_json/status_text/metrics_text with job, offset and limit (fgb_status_query and
    fgb_metrics_query): this daemon serves tier0 and a second, one-rank job."""
    r, _ = world
    other = f"tier0-other-{r}"
    with C.Client() as c2:
        c2.join(name=other, rank=0, size=1)
        every = job.status_json()
        names = [j["name"] for j in every["jobs"]]
        assert {"tier0", other} <= set(names) and every["jobs_total"] == len(names)
        one = job.status_json(job=other)
        assert [j["name"] for j in one["jobs"]] == [other] and one["jobs_total"] == 1
        assert "truncated" not in one
        none = job.status_json(job="no-such-job")
        assert none["jobs"] == [] and none["jobs_total"] == 0
        # Pages of one: the daemon's order, each job once.
        paged = [job.status_json(offset=k, limit=1)["jobs"] for k in range(len(names))]
        assert [p[0]["name"] for p in paged] == names
        assert job.status_json(offset=len(names))["jobs"] == []
        text = job.status_text(job="tier0")
        assert "job tier0 " in text and other not in text
        m = job.metrics_text(job=other)
        assert f'fgbuff_job="{other}"' in m and 'fgbuff_job="tier0"' not in m
        assert "fgbuff_metrics_jobs_shown{" in m and "fgbuff_metrics_truncated{" in m
        shown = [ln for ln in m.splitlines() if ln.startswith("fgbuff_metrics_jobs_shown{")]
        assert shown and shown[0].endswith(" 1"), shown
        assert all(f'fgbuff_job="{n}"' in job.metrics_text() for n in names)
        for bad in ({"offset": -1}, {"limit": 1 << 32}, {"offset": 1.5}):
            with pytest.raises(ValueError):
                job.status_json(**bad)


def test_config_list_is_the_daemons_table(job):
    """config_list: every live key with value, range and doc; a key set is listed with its new
    value, and config_get agrees with the list."""
    keys = job.config_list()
    assert {"log_level", "stall_timeout_ms", "fusion_cycle_ms", "peer_timeout_ms",
            "max_jobs"} <= set(keys), keys
    assert all(v["range"] and v["doc"] for v in keys.values()), keys
    for k in ("stall_timeout_ms", "max_jobs"):
        assert keys[k]["value"] == job.config_get(k)
    assert keys["stall_timeout_ms"]["range"] == "1..86400000"


def test_library_lookup_error_names_places(tmp_path):
    import subprocess

    env = dict(os.environ, FGBUFF_CLIENT_LIB=str(tmp_path / "nope.so"), PKG_CONFIG_PATH="")
    code = ("import fgbuff._lib as L\n"
            "L._candidates = lambda: [L.os.environ['FGBUFF_CLIENT_LIB']]\n"
            "try:\n    L.load()\nexcept L.LibraryNotFound as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60).stdout
    assert "nope.so (absent)" in out and "FGBUFF_CLIENT_LIB" in out


def test_guard_calls_refuse_before_any_device_work():
    """The non-finite guards need no device to refuse: a build without CUDA answers NotSupported
    for both; a CUDA build checks the arguments first (a shared scratch, another dtype) and
    raises InvalidArgument naming the call; n past the array is a ValueError either way."""
    items = C.guard_items(2)
    items[0] = C.GuardItem(0x1000, 4, C.FLOAT32, 0, 0x2000, 0x3000)
    items[1] = C.GuardItem(0x1100, 4, C.FLOAT32, 0, 0x2001, 0x3000)  # the same scratch
    with pytest.raises(ValueError):
        C.nonfinite_guard_many(items, 3)
    if not C.has_nonfinite_guard():
        assert not C.has_nonfinite_guard_many()
        for n in (2, 0):  # whatever the arguments
            with pytest.raises(C.NotSupported, match="without CUDA"):
                C.nonfinite_guard_many(items, n)
        return
    C.nonfinite_guard_many(items, 0)  # nothing to do
    with pytest.raises(C.InvalidArgument, match="fgb_nonfinite_guard_many.*shared scratch"):
        C.nonfinite_guard_many(items, 2)
    items[1].scratch = 0x3008
    items[1].dtype = C.INT32
    with pytest.raises(C.InvalidArgument):
        C.nonfinite_guard_many(items, 2)


def test_release_tensor_and_arena(job, world):
    a = job.arena_alloc_host(4096)
    v = a.view()
    t = job.tensor_register("rel.x", a, 0, 4, C.FLOAT32, (4,))
    g = job.tensor_register("rel.g", a, 64, 4, C.FLOAT32, (4,))
    job.tensor_release(t)
    with pytest.raises(C.NotFound) as e:
        job.tensor_release(t)
    assert "tensor_id" in str(e.value)
    with pytest.raises(C.Busy) as e:
        job.arena_release(a)
    assert "arena_id" in str(e.value)
    v[0:16] = struct.pack("4f", 777.0, 777.0, 777.0, 777.0)
    v[64:80] = struct.pack("4f", 2.0, 2.0, 2.0, 2.0)
    job.submit(g, 0)
    job.end_step(0)  # flushes the job's other tensors, never the released one
    job.wait_step(0, TO)
    assert struct.unpack("4f", bytes(v[0:16])) == (777.0,) * 4
    assert struct.unpack("4f", bytes(v[64:80])) == (2.0,) * 4
    t2 = job.tensor_register("rel.x", a, 0, 4, C.FLOAT32, (4,))  # the name again
    assert t2 != t
    job.tensor_release(t2)
    job.tensor_release(g)
    job.arena_release(a)
    with pytest.raises(C.NotFound):
        job.arena_release(a)


def test_wait_many_on_stream_host_tensors(job, world):
    """fgb_wait_many_on_stream on host-arena tensors waits on the host: the results are in place
    when it returns; an unknown id is named with its index; an empty list waits for nothing."""
    r, n = world
    a = job.arena_alloc_host(4096)
    v = a.view()
    x = job.tensor_register("wm.x", a, 0, 4, C.FLOAT32, (4,))
    y = job.tensor_register("wm.y", a, 64, 4, C.FLOAT32, (4,))
    v[0:16] = struct.pack("4f", *[(r + 1) * 1.0 + i for i in range(4)])
    v[64:80] = struct.pack("4f", 5.0, 5.0, 5.0, 5.0)
    job.submit(x, 1)  # y is not submitted: flushed as zeros by end_step
    job.end_step(1)
    with pytest.raises(C.NotFound) as e:
        job.wait_many_on_stream([x, 987654], 1, 0, TO)
    assert "987654" in str(e.value) and "index 1" in str(e.value)
    job.wait_many_on_stream([], 1, 0, TO)
    job.wait_many_on_stream(C.Client.tensor_ids([x, y]), 1, 0, TO)
    mean = sum(q + 1.0 for q in range(n)) / n
    assert struct.unpack("4f", bytes(v[0:16])) == tuple(mean + i for i in range(4))
    assert struct.unpack("4f", bytes(v[64:80])) == (0.0,) * 4
    job.wait_step(1, TO)


def _big_input(n, step, rank):
    """A deterministic fp32 gradient of n elements in [-0.5, 0.5), distinct per step and rank."""
    return array("f", [((i * 7919 + step * 104729 + rank * 15485863) % 1000003) / 1000003.0 - 0.5
                       for i in range(n)]).tobytes()


def _big_job(name, n, inputs, state=None, export_before_last=False):
    """A fresh job `name` with one top-k 0.01 tensor of n fp32: optionally import `state` first,
    synchronise inputs[0], inputs[1], ... as steps 0, 1, ... Returns the last step's result, the
    state exported before the last step (export_before_last) and the state right after the
    import (state given)."""
    c = C.Client()
    try:
        c.join(name=name)
        a = c.arena_alloc_host(4 * n)
        v = a.view()
        t = c.tensor_register("g", a, 0, n, C.FLOAT32, (n,), compressor="topk", density=0.01)
        imported = None
        if state is not None:
            deadline = time.monotonic() + 30
            while True:  # Again until the job formed and the tensor is agreed
                try:
                    c.state_import(t, state)
                    break
                except C.Again:
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
            imported = c.state_export(t)
        before = None
        for step, x in enumerate(inputs):
            if export_before_last and step == len(inputs) - 1:
                before = c.state_export(t)
            v[: 4 * n] = x
            c.submit(t, step)
            c.end_step(step)
            c.wait(t, step, TO)
        return bytes(v[: 4 * n]), before, imported
    finally:
        c.close()


def test_state_larger_than_a_frame_resumes_bitwise(world):
    """A top-k residual of 2M fp32 (8 MB, a frame is 1 MiB) exported after step 1, imported into
    a fresh job: its step equals the uninterrupted run's step 2 bitwise; a fresh job without the
    import differs (the residual matters)."""
    r, _ = world
    n = 2_000_000
    xs = [_big_input(n, s, r) for s in range(3)]
    whole, state, _ = _big_job("bigstate.a", n, xs, export_before_last=True)
    assert state is not None and len(state) > 4 * n > (1 << 20)
    resumed, _, imported = _big_job("bigstate.b", n, xs[2:], state=state)
    assert imported == state  # both ways through the chunks, byte for byte
    assert resumed == whole
    fresh, _, _ = _big_job("bigstate.c", n, xs[2:])
    assert fresh != whole


def test_dead_peer_raises_within_10s(job, world):
    r, n = world
    a = job.arena_alloc_host(4096)
    t = job.tensor_register("dead", a, 0, 4, C.FLOAT32, (4,))
    if r == n - 1:
        time.sleep(0.5)
        os._exit(0)  # dies without a goodbye; the launcher tolerates rc 0
    time.sleep(1.0)
    t0 = time.monotonic()
    with pytest.raises((C.PeerFailed, C.Closed)) as e:
        job.allreduce(t, C.OP_SUM, 30000)
    took = time.monotonic() - t0
    assert took < 10.0, f"took {took:.1f}s: {e.value}"
