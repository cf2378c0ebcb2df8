"""Before trusting client-truth figures on a new machine (a VM, gVisor, Firecracker): does CPU
pinning hold, and does the kernel hand out receive stamps (`SO_TIMESTAMPNS`) that mean what they
mean on plain Linux — the arrival of the last packet of a read, on the realtime clock?

    python benchmarks/host_check.py

Prints one line per check and exits 1 if one fails. The stamp check sends 3 messages 5 ms apart
over loopback TCP, reads them in one read 50 ms later, and compares the stamp with the send time
of the last message (plain Linux: within a fraction of a millisecond) and with the read time.
"""

from __future__ import annotations

import os
import platform
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def pinning() -> bool:
    before = os.sched_getaffinity(0)
    ok = True
    for cpu in sorted(before)[-2:]:
        os.sched_setaffinity(0, {cpu})
        t = time.process_time() + 0.05
        while time.process_time() < t:
            pass
        got = os.sched_getaffinity(0)
        ok &= got == {cpu}
        print(f"pin to CPU {cpu}: affinity reads back {sorted(got)}")
    os.sched_setaffinity(0, before)
    return ok


def stamps() -> bool:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    cli = socket.create_connection(srv.getsockname())
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        cli.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError as e:
        print(f"SO_TIMESTAMPNS refused: {e}")
        return False
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent = []
    for k in range(3):
        sent.append(time.time_ns())
        conn.send(b"x%d" % k)
        time.sleep(0.005)
    time.sleep(0.05)
    read_at = time.time_ns()
    data, anc, _, _ = cli.recvmsg(4096, 64)
    stamp = None
    for level, kind, blob in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(blob) >= 16:
            sec, nsec = struct.unpack_from("@qq", blob)
            stamp = sec * 1_000_000_000 + nsec
    for s in (cli, conn, srv):
        s.close()
    if stamp is None:
        print(f"no receive stamp in the ancillary data ({len(data)} bytes read): loadgate stamps in user space here")
        return False
    print(f"one read of {len(data)} bytes ({data!r}); stamp - last send {(stamp - sent[-1]) / 1e6:+.3f} ms, "
          f"stamp - first send {(stamp - sent[0]) / 1e6:+.3f} ms, read - stamp {(read_at - stamp) / 1e6:+.3f} ms")
    return len(data) == 6 and -1e6 < stamp - sent[-1] < 1e6


def wakeups(n: int = 200, gap_s: float = 0.005) -> bool:
    """How late an idle event loop reads data after the kernel stamped it (`read - stamp`), and
    how far the stamp (converted to the monotonic clock the way loadgate does) lies from the
    sender's own monotonic send time (`stamp - send`): `n` sends `gap_s` apart from another process."""
    import asyncio
    import multiprocessing

    import numpy as np
    import uvloop

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from loadgate.load.transport import WALL_TO_MONO

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    ctx = multiprocessing.get_context("fork")
    sends = ctx.Queue()

    def sender(addr: tuple[str, int]) -> None:
        c = socket.create_connection(addr)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = []
        for _ in range(n):
            time.sleep(gap_s)
            out.append(time.perf_counter_ns())
            c.send(b"x")
        sends.put(out)
        c.recv(1)

    proc = ctx.Process(target=sender, args=(srv.getsockname(),))
    proc.start()
    conn, _ = srv.accept()
    conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    conn.setblocking(False)
    got: list[tuple[int, int]] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def readable() -> None:
            begin = time.perf_counter_ns()
            data, anc, _, _ = conn.recvmsg(4096, 64)
            for level, kind, blob in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack_from("@qq", blob)
                    got.extend([(begin, sec * 1_000_000_000 + nsec - WALL_TO_MONO.offset(begin))] * len(data))
            if len(got) >= n and not done.done():
                done.set_result(None)

        loop.add_reader(conn.fileno(), readable)
        await asyncio.wait_for(done, 30)
        loop.remove_reader(conn.fileno())

    uvloop.run(run())
    sent = sends.get(timeout=10)
    conn.send(b"q")
    proc.join(10)
    conn.close()
    srv.close()
    late = np.asarray([(b - s) / 1e6 for b, s in got])
    off = np.asarray([(s - t) / 1e6 for (_, s), t in zip(got, sent, strict=False)])
    print(f"idle loop, {n} wake-ups: read - stamp p50 {np.percentile(late, 50):.3f} p99 {np.percentile(late, 99):.3f} "
          f"max {late.max():.3f} ms; stamp - send p50 {np.percentile(off, 50):.3f} p99 {np.percentile(off, 99):.3f} "
          f"max {off.max():.3f} ms")
    return bool(np.percentile(late, 99) < 1.0 and abs(np.percentile(off, 50)) < 0.5)


def main() -> None:
    print(f"{platform.node()}: {platform.system()} {platform.release()}, {os.cpu_count()} cores, "
          f"affinity {len(os.sched_getaffinity(0))} CPUs, Python {platform.python_version()}")
    ok = [pinning(), stamps(), wakeups()]
    print("host check:", "ok" if all(ok) else "FAILED")
    sys.exit(0 if all(ok) else 1)


if __name__ == "__main__":
    main()
