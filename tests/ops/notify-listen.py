#!/usr/bin/env python3
"""A fake sd_notify receiver (what systemd does with NOTIFY_SOCKET), for tests without systemd.

    notify-listen.py ADDR OUT [SECONDS]

ADDR is a socket path, or @name for the abstract namespace. Each datagram is written to OUT as one
line: "<sender pid> <message with newlines as |>", the pid taken from SCM_CREDENTIALS (SO_PASSCRED),
as systemd does to decide which process may notify. Runs until SECONDS (default 120) or SIGTERM."""
import os
import signal
import socket
import struct
import sys
import time

addr, out = sys.argv[1], sys.argv[2]
limit = float(sys.argv[3]) if len(sys.argv) > 3 else 120.0
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind("\0" + addr[1:] if addr.startswith("@") else addr)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
end = time.monotonic() + limit
with open(out, "a", buffering=1) as f:
    f.write("listening\n")
    while time.monotonic() < end:
        s.settimeout(max(0.1, end - time.monotonic()))
        try:
            msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            break
        pid = -1
        for level, typ, data in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", data[:12])[0]
        f.write("%d %s\n" % (pid, msg.decode(errors="replace").replace("\n", "|")))
