#!/usr/bin/env python3
"""Print a free TCP port on 127.0.0.1 for a test's listener that other processes must dial.

Not an ephemeral port (bind to port 0): that one is free only until the socket closes, and the
kernel hands ports of the same range to every outgoing connect() of the machine — under a
parallel ctest, another test's connection (or a member's own retrying connect to the port, which
on loopback can connect to itself) may hold it by the time the daemon listens, and its listen
fails with "Address already in use". A port below the ephemeral range is only ever taken by an
explicit bind, so a random one that binds now stays free unless another test draws the same one.
"""
import random
import socket


def ephemeral_start():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def main():
    hi = ephemeral_start() - 1
    lo = 10000 if hi > 12000 else 1024
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randint(lo, hi)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        print(port)
        return 0
    raise SystemExit("free_port: no free port in %d-%d after 200 tries" % (lo, hi))


if __name__ == "__main__":
    raise SystemExit(main())
