"""Hostile local peers: a user on the same host who can reach the kernel's
five ports but does not know the HMAC key attacks a running kernel; the
supervisor must survive, stay idle and bounded, and keep serving the real
client. argv[1] is the mode; each ends with after_attack() (supervisor alive
and not a zombie, idle, RSS under the mode's bound, the kernel's own client,
connected before the attack, still answered). What takes time is waited for
up to harness.GONE_WAIT, a bound only a failure reaches, and the time noted:
no duration is asserted. Attacks use raw ZMTP 3.0 (class Zmtp) or pyzmq
where stated.

mode        attack                                                    RSS bound
rawclient   self-check of Zmtp: a signed kernel_info over raw ZMTP    120 MiB
bigframe    a frame header declaring 2**62 bytes, on shell and iopub  120 MiB
            -> connection closed, supervisor alive
badcmd      malformed READY / commands, each on its own connection,  120 MiB
            on shell and iopub -> every connection closed
silent      20 idle TCP connections on shell and 20 on hb -> a new    120 MiB
            client is ready and answered
iopubjunk   2000 x (SUB handshake, 3 non-subscription messages,       120 MiB
            close) -> fds within baseline + 10
topics      1,000,000 distinct subscriptions on one SUB connection    120 MiB
            -> all 2000 display_data arrive (the slowdown noted)
pings       ZMTP PINGs as fast as possible for 10 s, never reading    100 MiB
            -> RSS max during the flood < 100 MiB
subscribers 40 SUBs subscribed to everything, never reading; the      150 MiB
            client prints 10 MB and gets all of it; RSS max < 150 MiB
identity    pyzmq DEALERs with the real client's identity on shell,   120 MiB
            stdin, control -> they get nothing, the client every reply
forged      5000 bad-signature shutdown/execute requests on shell and 120 MiB
            control -> same kernel, <= 20 supervisor log lines on it
garbage     per port 200 x 4 KiB random bytes, 50 x random after a    120 MiB
            valid greeting -> fds within baseline + 10
fdlimit     supervisor at RLIMIT_NOFILE 1024, 1500 connections held   120 MiB
            3 s -> CPU < 50 %, answers, fds back, restart kills all
churn       E2E_CHURN_CYCLES (1000) client connect/kernel_info/close  120 MiB
            -> fds and RSS flat after warm-up (+5 fds, +8 MiB)
soak        E2E_SOAK_RESTARTS (200) restarts -> no process, cgroup,   120 MiB
            state file or XDG_RUNTIME_DIR entry left

Expectations only the supervisor can meet are h.check()s: against a stock
kernel (TFGPU_E2E_KERNEL=python3) they become facts.
"""

import json
import os
import queue
import random
import resource
import select
import signal
import socket
import struct
import sys
import threading
import time
import uuid

import zmq
import zmq.asyncio
from jupyter_client.blocking import BlockingKernelClient

import harness as h
from zmtpraw import GREETING, frame, message, ready

MODE = sys.argv[1] if len(sys.argv) > 1 else "bigframe"
MIB = 1024  # RSS figures are KiB
CLK = os.sysconf("SC_CLK_TCK")
CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
PEER_TYPE = {"iopub": b"SUB"}  # every other port is a ROUTER: talk as a DEALER
RSS_ABORT_KIB = 2 << 20  # stop any flood once the supervisor holds 2 GiB

# ---------------------------------------------------------------- raw ZMTP

_OPEN = []  # every attacker socket, closed at the end whatever happens
PORTS = {}
IP = "127.0.0.1"


def tcp(chan, rcvbuf=None, timeout=5):
    """A plain TCP connection to chan's port (no ZMTP)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    _OPEN.append(s)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    try:
        s.connect((IP, PORTS[chan]))
    except OSError as e:
        raise AssertionError("cannot connect to %s port %d: %r" % (chan, PORTS[chan], e))
    return s


class Zmtp:
    """One raw ZMTP 3.0 NULL connection: greeting, READY as sock_type (None:
    stop after the greeting), then raw frames."""

    def __init__(self, chan, sock_type=None, identity=None, rcvbuf=None, greet=True, timeout=5):
        self.chan = chan
        self.s = tcp(chan, rcvbuf, timeout)
        if greet:
            self.s.sendall(GREETING)
            g = self.recv_exact(64)
            assert g[0] == 0xFF and g[9] == 0x7F and g[10] == 3 and g[12:16] == b"NULL", "%s: not a ZMTP 3 NULL greeting: %r" % (chan, g)
        if sock_type is not None:
            self.s.sendall(ready(sock_type, identity))
            flags, body = self.recv_frame()
            assert flags & 0x04 and body.startswith(b"\x05READY"), "%s: expected READY, got flags %#x %r" % (chan, flags, body[:40])
            self.peer_ready = body

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            b = self.s.recv(n - len(buf))
            if not b:
                raise AssertionError("%s: closed by the peer after %d of %d bytes" % (self.chan, len(buf), n))
            buf += b
        return buf

    def recv_frame(self):
        flags = self.recv_exact(1)[0]
        size = struct.unpack(">Q", self.recv_exact(8))[0] if flags & 0x02 else self.recv_exact(1)[0]
        return flags, self.recv_exact(size)

    def recv_message(self):
        """The next message's frames, ZMTP commands (PONGs) skipped."""
        frames = []
        while True:
            flags, body = self.recv_frame()
            if flags & 0x04:
                continue
            frames.append(body)
            if not flags & 0x01:
                return frames

    def send(self, data):
        self.s.sendall(data)

    def close(self):
        self.s.close()


def closed_by_peer(s, timeout=5):
    """True when the peer closes s (EOF or reset) within timeout; what it
    sends meanwhile is discarded."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        s.settimeout(left)
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            return False
        except OSError:  # ECONNRESET
            return True


def close_all():
    for s in _OPEN:
        try:
            s.close()
        except OSError:
            pass
    _OPEN.clear()


# ---------------------------------------------------------------- measuring


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    f = s[s.rindex(")") + 2 :].split()
    return int(f[11]) + int(f[12])  # utime + stime


def nfds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None


def snapshot(pid):
    return {"fds": nfds(pid), "rss_kib": h.rss_kib(pid), "cpu_ticks": cpu_ticks(pid) if h.alive(pid) else None}


def wait_idle(pid, within=h.GONE_WAIT, window=0.5, max_ticks=2):
    """Poll up to `within` s (a bound only a failure reaches) for a `window`
    s in which pid's CPU ticks grow by at most max_ticks; returns (idle,
    ticks of the last window, seconds until idle)."""
    start = time.monotonic()
    while True:
        c0 = cpu_ticks(pid)
        time.sleep(window)
        grew = cpu_ticks(pid) - c0
        if grew <= max_ticks:
            return True, grew, time.monotonic() - start
        if time.monotonic() + window > start + within + 0.05:
            return False, grew, time.monotonic() - start


def wait_fds(pid, most, settle=h.GONE_WAIT):
    """Poll up to settle s (a bound only a failure reaches) for pid's fd
    count to be <= most; returns the count."""
    deadline = time.monotonic() + settle
    while True:
        n = nfds(pid)
        if n is not None and n <= most or time.monotonic() >= deadline:
            return n
        time.sleep(0.1)


def rss_sampler(pid, every=0.02):
    """Samples pid's RSS every `every` s in a thread; the returned function
    stops it and returns the largest sample (KiB)."""
    top, stop = [0], threading.Event()

    def run():
        while not stop.is_set():
            top[0] = max(top[0], h.rss_kib(pid) or 0)
            time.sleep(every)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return lambda: (stop.set(), t.join(), top[0])[2]


def log_text(km):
    with open(km.e2e_log, "rb") as f:
        return f.read().decode(errors="replace")


def why_dead(km):
    """The supervisor's panic or fatal error line from its log, if any."""
    lines = log_text(km).splitlines()
    for i, l in enumerate(lines):
        if l.startswith(("panic:", "fatal error:")):
            return " | ".join(lines[i : i + 2])
    return "no panic line in %s" % km.e2e_log


def assert_alive(km, what):
    sup = km.provisioner.pid
    time.sleep(0.1)  # a process that just closed its sockets may not be a zombie yet
    assert h.alive(sup), "supervisor (pid %d, state %s) died %s: %s" % (sup, h.proc_state(sup), what, why_dead(km))


def reply_to(get, msg_id, timeout):
    """The reply to msg_id that get (kc.get_shell_msg, kc.get_control_msg)
    returns within timeout, or None; other messages are dropped."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            m = get(timeout=left)
        except queue.Empty:
            return None
        if m["parent_header"].get("msg_id") == msg_id:
            return m
    return None


def answers(kc, what):
    """None when kc answers 6*7, else why not (for h.check)."""
    try:
        h.assert_answers(kc, what)
    except AssertionError as e:
        return str(e)
    return None


def after_attack(km, kc, mode, rss_mib, stock_may_lose=False):
    """The common verdict: alive, idle (waited for, the time noted), RSS <
    rss_mib, kc answers."""
    sup = km.provisioner.pid
    assert_alive(km, "after the %s attack" % mode)
    idle, ticks, waited = wait_idle(sup)
    snap = snapshot(sup)
    h.note(after=snap, after_idle_window_ticks=ticks, idle_after_s=round(waited, 2))
    h.check(idle, "%s: supervisor not idle %.0f s after the attack (%d CPU ticks in the last 0.5 s, %d per s)" % (mode, waited, ticks, CLK))
    h.check(snap["rss_kib"] < rss_mib * MIB, "%s: supervisor RSS %d MiB after the attack (bound %d MiB)" % (mode, snap["rss_kib"] // MIB, rss_mib))
    err = answers(kc, "the kernel's client after the %s attack" % mode)
    if stock_may_lose:
        h.check(err is None, str(err))
    else:
        assert err is None, err


# ---------------------------------------------------------------- modes


def rawclient(km, kc, base):
    """Self-check: a signed kernel_info_request over a raw DEALER on shell is
    answered, so the handshake and framing of Zmtp are right."""
    z = Zmtp("shell", b"DEALER")
    msg = kc.session.msg("kernel_info_request", {})
    z.send(message(*kc.session.serialize(msg)))
    z.s.settimeout(10)
    frames = z.recv_message()
    reply = kc.session.deserialize(kc.session.feed_identities(frames)[1])
    assert reply["msg_type"] == "kernel_info_reply" and reply["parent_header"]["msg_id"] == msg["header"]["msg_id"], reply["msg_type"]
    h.note(raw_reply=reply["msg_type"], server_ready=z.peer_ready.decode(errors="replace"))
    z.close()
    after_attack(km, kc, "rawclient", 120)


def bigframe(km, kc, base):
    closed = {}
    for chan in ("shell", "iopub"):
        z = Zmtp(chan, PEER_TYPE.get(chan, b"DEALER"))
        z.send(b"\x02" + struct.pack(">Q", 2**62))
        closed[chan] = closed_by_peer(z.s, h.GONE_WAIT)
        z.close()
        assert_alive(km, "after a frame header declaring 2**62 bytes on %s" % chan)
    h.note(closed=closed)
    for chan, c in closed.items():
        h.check(c, "bigframe: the %s connection that declared a 2**62-byte frame was still open %d s later" % (chan, h.GONE_WAIT))
    after_attack(km, kc, "bigframe", 120)


BADCMD = [
    # (name, send after a complete handshake?, bytes)
    ("a: READY, property name length 200 in an 11-byte rest", False, frame(b"\x05READY" + bytes([200]) + b"Socket-Type", command=True)),
    ("b: READY, value length 2**20 with 6 bytes", False, frame(b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 1 << 20) + b"DEALER", command=True)),
    ("c: command name length 200 in a 10-byte body", True, frame(bytes([200]) + b"123456789", command=True)),
    ("c': the same instead of READY", False, frame(bytes([200]) + b"123456789", command=True)),
    ("d: PING command with the MORE flag", True, frame(b"\x04PING\x00\x00", more=True, command=True)),
    ("e: unknown command UNKNOWN", True, frame(b"\x07UNKNOWN" + b"payload", command=True)),
    ("a': READY, property name length 12 in an 11-byte rest", False, frame(b"\x05READY" + bytes([12]) + b"Socket-Type", command=True)),
    ("b': READY, a name and no value length", False, frame(b"\x05READY" + b"\x0bSocket-Type", command=True)),
]


def badcmd(km, kc, base):
    """Each case on its own connection; the cases of the brief first, then
    two off-by-one variants, each group waited for together (harness.GONE_WAIT
    at most: a bound only a failure reaches)."""
    res = {}
    for group in (BADCMD[:6], BADCMD[6:]):
        conns = {}
        for name, after_ready, data in group:
            for chan in ("shell", "iopub"):
                z = Zmtp(chan, PEER_TYPE.get(chan, b"DEALER") if after_ready else None)
                z.send(data)
                conns["%s on %s" % (name, chan)] = z
                assert_alive(km, "after %r on %s" % (name, chan))
        deadline = time.monotonic() + h.GONE_WAIT
        for k, z in conns.items():
            res[k] = "closed" if closed_by_peer(z.s, max(0, deadline - time.monotonic())) else "open after %d s" % h.GONE_WAIT
            z.close()
        h.note(badcmd=res)
    left = [k for k, v in res.items() if v != "closed"]
    h.check(not left, "badcmd: connections not closed by the supervisor within %d s: %s" % (h.GONE_WAIT, left))
    after_attack(km, kc, "badcmd", 120)


def silent(km, kc, base):
    for chan in ("shell", "hb"):
        for _ in range(20):
            tcp(chan)
    time.sleep(0.5)
    t0 = time.monotonic()
    kc2 = BlockingKernelClient(connection_file=km.connection_file)
    kc2.load_connection_file()
    kc2.start_channels()
    h._CLIENTS.append(kc2)
    err = None
    try:
        kc2.wait_for_ready(timeout=h.GONE_WAIT)
        err = answers(kc2, "a new client while 40 silent connections are open")
    except RuntimeError as e:
        err = "wait_for_ready: %s" % e
        shell = reply_to(kc2.get_shell_msg, kc2.kernel_info(), 10)  # hb only, or shell too?
        err += "; its shell kernel_info %s" % ("was answered" if shell else "got no reply either")
    took = time.monotonic() - t0
    # Ready and answered (the time noted, not asserted): the silent
    # connections do not keep a new client out.
    h.note(new_client_s=round(took, 3), new_client_error=err, fds_with_silent=nfds(km.provisioner.pid))
    kc2.stop_channels()
    h.check(err is None, "silent: a new client was not ready and answered while 40 silent connections were open "
            "(%.1f s: %s)" % (took, err))
    close_all()
    after_attack(km, kc, "silent", 120)


def iopubjunk(km, kc, base):
    sup = km.provisioner.pid
    junk = [message(b"hello"), message(b"\x01not", b"a", b"subscription"), message(b"")]
    t0 = time.monotonic()
    for i in range(2000):
        z = Zmtp("iopub", b"SUB")
        for m in junk:
            z.send(m)
        z.close()
        _OPEN.remove(z.s)
        if i % 250 == 249:
            assert_alive(km, "after %d junk iopub connections" % (i + 1))
    assert_alive(km, "after 2000 junk iopub connections")
    n = wait_fds(sup, base["fds"] + 10)
    h.note(junk_s=round(time.monotonic() - t0, 2), fds_after=n)
    h.check(n <= base["fds"] + 10, "iopubjunk: supervisor holds %d fds %d s after 2000 junk iopub connections closed (baseline %d)" % (
        n, h.GONE_WAIT, base["fds"]))
    after_attack(km, kc, "iopubjunk", 120)


DISPLAY_2000 = "from IPython.display import display\nfor i in range(2000): display({'text/plain': str(i)}, raw=True)"


def time_displays(kc, timeout):
    """Seconds from execute to the idle status of the 2000-display cell, and
    the display_data received (iopub only: h.collect's polling of three
    channels would cost ~10 ms a message)."""
    t0 = time.monotonic()
    mid = kc.execute(DISPLAY_2000)
    n = 0
    while time.monotonic() - t0 < timeout:
        try:
            m = kc.get_iopub_msg(timeout=0.1)
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") != mid:
            continue
        if m["msg_type"] == "display_data":
            n += 1
        elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            break
    return time.monotonic() - t0, n  # its execute_reply is left behind: h.collect skips it


def topics(km, kc, base):
    sup = km.provisioner.pid
    before, n = time_displays(kc, 60)
    assert n == 2000, "only %d of 2000 display_data before the attack" % n
    z = Zmtp("iopub", b"SUB")
    z.s.settimeout(10)
    sent, t0, rss_max, ended = 0, time.monotonic(), 0, "all sent"
    while sent < 1_000_000:
        try:
            z.send(b"".join(frame(b"\x01topic-%07d" % i) for i in range(sent, sent + 20000)))
        except socket.timeout:
            ended = "the supervisor stopped reading for 10 s"  # a cap, like libzmq's
            break
        except OSError as e:
            ended = "closed by the supervisor (%s)" % e
            break
        sent += 20000
        rss_max = max(rss_max, h.rss_kib(sup) or 0)
        if rss_max > RSS_ABORT_KIB or time.monotonic() - t0 > 60:
            ended = "given up at RSS %d MiB after %.0f s" % (rss_max // MIB, time.monotonic() - t0)
            break
    if ended == "all sent" and closed_by_peer(z.s, 0.5):
        ended = "closed by the supervisor after all were sent"
    h.note(subscriptions_sent=sent, send_s=round(time.monotonic() - t0, 2), attacker=ended, rss_kib_max_sending=rss_max)
    assert_alive(km, "after %d subscriptions on one connection" % sent)
    # All 2000 arrive (within a bound only a failure reaches); how much
    # slower than before is noted, not asserted.
    after, n = time_displays(kc, max(60, 5 * before))
    ratio = after / before
    h.note(displays_before_s=round(before, 3), displays_after_s=round(after, 3), displays_after_received=n, ratio=round(ratio, 2),
           rss_kib_after_displays=h.rss_kib(sup))
    h.log("topics: 2000 display_data took %.2f s with the subscribed attacker, %.2f s before (ratio %.1f)" % (after, before, ratio))
    h.check(n == 2000, "topics: %d of 2000 display_data received with the subscribed attacker (%.2f s; %.2f s before)" % (n, after, before))
    rss_max = max(rss_max, h.rss_kib(sup))
    h.check(rss_max < 120 * MIB, "topics: supervisor RSS reached %d MiB holding the attacker's subscriptions (bound 120 MiB)" % (rss_max // MIB))
    z.close()
    after_attack(km, kc, "topics", 120)


def pings(km, kc, base):
    sup = km.provisioner.pid
    z = Zmtp("shell", b"DEALER", rcvbuf=4096)
    batch = frame(b"\x04PING" + struct.pack(">H", 0) + b"0123456789abcdef", command=True) * 10000
    view, off, sent, closed, rss_max = memoryview(batch), 0, 0, False, 0
    z.s.setblocking(False)
    t0 = last = time.monotonic()
    while time.monotonic() - t0 < 10:
        try:
            n = z.s.send(view[off:])
            sent += n
            off = (off + n) % len(batch)
        except BlockingIOError:
            select.select([], [z.s], [], 0.02)
        except OSError:
            closed = True
            break
        if time.monotonic() - last >= 0.02:
            last = time.monotonic()
            rss_max = max(rss_max, h.rss_kib(sup) or 0)
            if rss_max > RSS_ABORT_KIB:
                break
    h.note(pings_sent=sent // 25, attacker_closed=closed, rss_kib_max=rss_max, flood_s=round(time.monotonic() - t0, 2))
    assert_alive(km, "after 10 s of PINGs")
    h.check(rss_max < 100 * MIB, "pings: supervisor RSS reached %d MiB during the PING flood from a peer that never reads (bound 100 MiB)" % (rss_max // MIB))
    z.close()
    after_attack(km, kc, "pings", 100)


def subscribers(km, kc, base):
    sup = km.provisioner.pid
    for _ in range(40):
        Zmtp("iopub", b"SUB", rcvbuf=4096).send(frame(b"\x01"))
    time.sleep(1)
    stop = rss_sampler(sup)
    r = h.execute(kc, "print('x' * 10_000_000)", timeout=60)
    rss_max = stop()
    got = r["stdout"].count("x")
    h.note(stdout_x=got, print_s=round(r["elapsed"], 2), rss_kib_max=rss_max)
    assert_alive(km, "while 40 stalled subscribers were sent 10 MB")
    assert got == 10_000_000, "the client received %d of the 10,000,000 x printed (reply %s)" % (got, r["status"])
    h.check(rss_max < 150 * MIB, "subscribers: supervisor RSS reached %d MiB sending 10 MB to 40 subscribers that never read (bound 150 MiB)" % (rss_max // MIB))
    close_all()
    after_attack(km, kc, "subscribers", 150)


def parse(frames):
    """msg_type and content of a Jupyter message seen by an attacker."""
    try:
        i = frames.index(b"<IDS|MSG>")
        return json.loads(frames[i + 2]).get("msg_type"), frames[i + 5]
    except (ValueError, IndexError):
        return "?", b"".join(frames)


def identity(km, kc, base):
    h.ok(h.execute(kc, "x = 'secret-value-123'"), "x = secret")
    ids = {"shell": kc.session.bsession, "stdin": kc.session.bsession,
           "control": kc.control_channel.socket.getsockopt(zmq.IDENTITY)}
    h.note(identities={k: v.decode(errors="replace") for k, v in ids.items()})
    ctx = zmq.Context()
    att = {}
    try:
        for chan, ident in ids.items():
            d = ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.IDENTITY, ident)
            d.setsockopt(zmq.LINGER, 0)
            d.connect("tcp://%s:%d" % (IP, PORTS[chan]))
            att[chan] = d
        time.sleep(1)  # let the handshakes land
        got = {}
        hist = reply_to(kc.get_shell_msg, kc.history(hist_access_type="tail", n=5), h.GONE_WAIT)
        insp = reply_to(kc.get_shell_msg, kc.inspect("x"), h.GONE_WAIT)
        req = kc.session.msg("kernel_info_request", {})
        kc.control_channel.send(req)
        ctrl = reply_to(kc.get_control_msg, req["header"]["msg_id"], h.GONE_WAIT)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            for chan, d in att.items():
                while d.poll(0):
                    t, content = parse(d.recv_multipart())
                    got.setdefault(chan, []).append(t + (" (with the secret)" if b"secret-value-123" in content else ""))
            time.sleep(0.05)
    finally:
        for d in att.values():
            d.close(linger=0)
        ctx.term()
    replies = {"history_reply": hist is not None, "inspect_reply_with_value": insp is not None and "secret-value-123" in json.dumps(insp["content"]),
               "control kernel_info_reply": ctrl is not None}
    h.note(attackers_received=got, client_received=replies)
    h.check(not got, "identity: attackers using the real client's identities received %s" % got)
    h.check(all(replies.values()), "identity: the real client missed replies: %s" % [k for k, v in replies.items() if not v])
    after_attack(km, kc, "identity", 120, stock_may_lose=True)


def forged_msg(session, msg_type, content):
    header = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "username": "mallory", "session": session,
              "date": "2024-01-01T00:00:00.000000Z", "version": "5.3"}
    return [b"<IDS|MSG>", os.urandom(32).hex().encode(), json.dumps(header).encode(), b"{}", b"{}", json.dumps(content).encode()]


def supervisor_signature_lines(km):
    """Log lines of the supervisor (slog, prog=tfgpu-kernel) about a
    signature; the kernel's own tracebacks share the file and are not counted."""
    lines = log_text(km).splitlines()
    return [l for l in lines if "signature" in l.lower() and "prog=tfgpu-kernel" in l], sum("Invalid Signature" in l for l in lines)


def forged(km, kc, base):
    kpid = h.kernel_pid(kc)
    h.track(kpid)
    sup_before, kern_before = supervisor_signature_lines(km)
    ctx = zmq.Context()
    sent, socks = 0, {}
    try:
        for chan in ("shell", "control"):
            d = ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.SNDTIMEO, 10000)
            d.connect("tcp://%s:%d" % (IP, PORTS[chan]))
            socks[chan] = d
        session = uuid.uuid4().hex
        kinds = [("shutdown_request", {"restart": False}),
                 ("execute_request", {"code": "import os; os._exit(7)", "silent": False, "store_history": True,
                                      "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})]
        for i in range(5000):
            t, c = kinds[i % 2]
            socks[("shell", "control")[(i // 2) % 2]].send_multipart(forged_msg(session, t, c))
            sent += 1
        time.sleep(1)
    finally:
        for d in socks.values():
            d.close(linger=2000)
        ctx.term()
    h.note(forged_sent=sent)
    assert_alive(km, "after %d forged requests" % sent)
    h.assert_answers(kc, "after the forged flood")  # shell has worked through the flood
    assert h.alive(kpid), "the kernel (pid %d) died after the forged flood" % kpid
    now = h.kernel_pid(kc)
    assert now == kpid, "the kernel changed from pid %d to %d: a forged request was acted upon" % (kpid, now)
    sup_after, kern_after = supervisor_signature_lines(km)
    n = len(sup_after) - len(sup_before)
    h.note(supervisor_signature_lines=n, kernel_invalid_signature_lines=kern_after - kern_before,
           first_supervisor_line=sup_after[len(sup_before)] if n else None)
    h.check(n <= 20, "forged: the supervisor logged %d lines about bad signatures for %d forged messages (at most 20)" % (n, sent))
    after_attack(km, kc, "forged", 120)


def garbage(km, kc, base):
    sup = km.provisioner.pid
    seed = int.from_bytes(os.urandom(4), "big")
    h.note(seed=seed)
    rng = random.Random(seed)
    for chan in CHANNELS:
        for i in range(250):
            try:
                s = tcp(chan) if i < 200 else Zmtp(chan).s
                s.sendall(rng.randbytes(4096))
            except (AssertionError, OSError) as e:  # fine if the supervisor hung up, and lives
                assert_alive(km, "on random bytes on %s, connection %d (seed %d; %s)" % (chan, i, seed, e))
            close_all()
        assert_alive(km, "after random bytes on %s (seed %d)" % (chan, seed))
    n = wait_fds(sup, base["fds"] + 10)
    h.note(fds_after=n)
    h.check(n <= base["fds"] + 10, "garbage: supervisor holds %d fds %d s after 1250 garbage connections closed (baseline %d)" % (
        n, h.GONE_WAIT, base["fds"]))
    after_attack(km, kc, "garbage", 120)


def fdlimit(km, kc, base):
    sup = km.provisioner.pid
    kids = h.spawn_children(kc)
    base = snapshot(sup)
    h.note(baseline_after_children=base)
    failed = 0
    for i in range(1500):
        chan = CHANNELS[i % 5]
        try:
            s = tcp(chan, timeout=2)
            if i % 2 == 0:  # half complete the handshake (not waiting for the supervisor's half)
                s.sendall(GREETING + ready(PEER_TYPE.get(chan, b"DEALER")))
        except (AssertionError, OSError):
            failed += 1
    t_hold = time.monotonic()
    time.sleep(0.5)
    c0 = cpu_ticks(sup)
    time.sleep(1)
    cpu_pct = (cpu_ticks(sup) - c0) * 100 // CLK
    fds_hold = nfds(sup)
    err = answers(kc, "the kernel's client while 1500 connections are held")
    time.sleep(max(0, 3 - (time.monotonic() - t_hold)))
    h.note(connect_failed=failed, cpu_pct_during_hold=cpu_pct, fds_during_hold=fds_hold, answer_during_hold=err)
    close_all()
    assert_alive(km, "while 1500 connections were held at RLIMIT_NOFILE 1024")
    n = wait_fds(sup, base["fds"] + 10)
    h.note(fds_after=n)
    h.check(cpu_pct < 50, "fdlimit: supervisor used %d%% CPU while 1500 connections were held at RLIMIT_NOFILE 1024" % cpu_pct)
    h.check(err is None, "fdlimit: %s" % err)
    h.check(n <= base["fds"] + 10, "fdlimit: supervisor holds %d fds %d s after the 1500 connections closed (baseline %d)" % (
        n, h.GONE_WAIT, base["fds"]))
    after_attack(km, kc, "fdlimit", 120)
    km.restart_kernel()
    left = h.wait_dead([kids["daemon"], kids["stubborn"]], h.GONE_WAIT)
    h.note(children_left_after_restart=h.describe(left))
    h.check(not left, "fdlimit: the old kernel's children survived the restart: %s" % h.describe(left))
    for p in left:
        os.kill(p, signal.SIGKILL)
    kc.stop_channels()
    kc = h.connect(km)
    h.tree_of(km)
    h.assert_answers(kc, "the new kernel after the restart")
    return kc


def churn(km, kc, base):
    sup = km.provisioner.pid
    cycles = int(os.environ.get("E2E_CHURN_CYCLES") or 1000)
    ctx = zmq.asyncio.Context()
    marks = {"before": snapshot(sup)}
    t0 = time.monotonic()
    try:
        for i in range(cycles):
            c = BlockingKernelClient(connection_file=km.connection_file, context=ctx)
            c.load_connection_file()
            c.start_channels()
            try:
                assert reply_to(c.get_shell_msg, c.kernel_info(), h.GONE_WAIT), "churn cycle %d: no kernel_info_reply within %d s" % (i, h.GONE_WAIT)
            finally:
                # jupyter_client 7.4.9's HBChannel sets _running in its thread:
                # stopped before that, it spins creating REQ sockets for ever.
                t = time.monotonic()
                while not c.hb_channel._running and time.monotonic() - t < 5:
                    time.sleep(0.001)
                c.stop_channels()
            if i + 1 == min(100, cycles):
                marks["after_100"] = snapshot(sup)
    finally:
        ctx.destroy(linger=0)
    # The last clients' connections close now: wait (a bound only a
    # failure reaches) for the fds and RSS to come within bounds, instead
    # of asserting after a sleep.
    w = marks["after_100"]
    over = lambda snap: snap["fds"] is None or snap["fds"] > w["fds"] + 5 or snap["rss_kib"] > w["rss_kib"] + 8 * MIB
    ended = time.monotonic()
    h.wait_gone(lambda: over(snapshot(sup)), interval=0.1)
    marks["after_all"] = snapshot(sup)
    h.note(cycles=cycles, churn_s=round(time.monotonic() - t0, 1), settled_s=round(time.monotonic() - ended, 2),
           **{"churn_" + k: v for k, v in marks.items()})
    assert_alive(km, "after %d client connect/disconnect cycles" % cycles)
    e = marks["after_all"]
    h.check(e["fds"] <= w["fds"] + 5, "churn: supervisor fds %d after %d cycles, %d after 100" % (e["fds"], cycles, w["fds"]))
    h.check(e["rss_kib"] <= w["rss_kib"] + 8 * MIB, "churn: supervisor RSS %d KiB after %d cycles, %d KiB after 100 (+8 MiB allowed)"
            % (e["rss_kib"], cycles, w["rss_kib"]))
    after_attack(km, kc, "churn", 120)


def leftovers(kid):
    """Cgroup directories and state files that name kernel id kid."""
    left = []
    for root in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/freezer", "/sys/fs/cgroup/pids"):
        for d, dirs, _ in os.walk(root):
            left += [os.path.join(d, x) for x in dirs if kid in x]
    state = os.environ.get("TFGPU_STATE_DIR") or ("/run/tfgpu-kernel" if os.geteuid() == 0 else
                                                   os.path.join(os.environ.get("XDG_RUNTIME_DIR", "/nonexistent"), "tfgpu-kernel"))
    if os.path.isdir(state):
        left += [os.path.join(state, f) for f in os.listdir(state) if f.startswith(kid)]
    return left


def soak(km, kc, base):
    n = int(os.environ.get("E2E_SOAK_RESTARTS") or 200)
    kid = os.path.basename(km.connection_file)[len("kernel-") : -len(".json")]
    t0 = time.monotonic()
    for i in range(n):
        km.restart_kernel()
        kc.stop_channels()
        kc = h.connect(km)
        h.tree_of(km)
        if i % 20 == 19:
            h.log("soak: %d restarts, %.0f s" % (i + 1, time.monotonic() - t0))
    with open(km.e2e_log, errors="replace") as f:
        adopted = f.read().count("took over the kernel's start with a spare kernel")
    h.note(restarts=n, soak_s=round(time.monotonic() - t0, 1), pids_tracked=len(h.PIDS), spare_adoptions=adopted)
    # The spare is on by default: the soak restarts through it too (those
    # that come before the next spare is ready start cold).
    h.check(adopted > 0, "soak: no restart of %d used a spare kernel" % n)
    after_attack(km, kc, "soak", 120)
    running = leftovers(kid)  # canary: what the check below looks for exists now
    h.check(running, "soak: no cgroup directory or state file names the running kernel %s: the leftover check proves nothing" % kid)
    km.shutdown_kernel()
    left, waited = h.wait_gone(lambda: leftovers(kid), interval=0.1)
    h.note(kernel_id=kid, while_running=running, leftovers=left, leftovers_gone_s=round(waited, 2))
    h.check(not left, "soak: left behind after %d restarts and the shutdown: %s" % (n, left))
    return None


MODES = {f.__name__: f for f in (rawclient, bigframe, badcmd, silent, iopubjunk, topics, pings, subscribers, identity, forged, garbage,
                                 fdlimit, churn, soak)}


def main():
    mode = MODES[MODE]
    if mode is fdlimit:  # 1500 sockets of our own
        resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    km, kc = h.start_kernel()
    sup = km.provisioner.pid
    if mode is fdlimit:
        resource.prlimit(sup, resource.RLIMIT_NOFILE, (1024, 1024))
    info = km.get_connection_info()
    assert info["transport"] == "tcp", info["transport"]
    global IP
    IP = info["ip"]
    PORTS.update({c: info["%s_port" % c] for c in CHANNELS})
    h.track(h.kernel_pid(kc))
    base = snapshot(sup)
    h.note(baseline=base)
    h.log("%s: attack starts" % MODE)
    done = False
    try:
        kc = mode(km, kc, base) or kc
        done = True
    finally:
        close_all()
        if not done and km.has_kernel and h.alive(sup):
            # A clean stop: the harness's shutdown_kernel(now=True) SIGKILLs the
            # supervisor, and what that leaves would bury the real failure.
            try:
                km.shutdown_kernel()
            except Exception as e:
                h.log("shutdown after the failure: %r" % e)
    h.log("%s: done, shutting down" % MODE)
    if km.has_kernel:
        km.shutdown_kernel()
        h.note(shutdown_status=h.shutdown_status(km))
    h.log("%s: shut down" % MODE)


h.run(main)
