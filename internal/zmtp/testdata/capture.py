#!/usr/bin/python3
"""Record real ZMTP client traffic (pyzmq/libzmq + jupyter_client) as fuzz seeds.

Run from the repository root:

    /usr/bin/python3 internal/zmtp/testdata/capture.py              # captures + hostile
    /usr/bin/python3 internal/zmtp/testdata/capture.py --hostile-only

A tiny recording ZMTP server (plain Python sockets, one listening socket per
kind, 127.0.0.1) sends a 64-byte NULL greeting as server plus a READY command
the moment a connection is accepted, then records every byte the client sends
until the client closes.  It never answers application messages.  Each
resulting .bin file is the exact byte stream one client connection sent, from
connect to close, with nothing added.  Every file is then walked frame by frame
(greeting, then flags / 1- or 8-byte size / body) and must parse exactly to
its end.

The hostile-*.bin streams are hand-made and deterministic; the captures contain
fresh message ids, dates, HMACs and random bytes, so they differ run to run.
"""

import argparse
import json
import os
import random
import socket
import struct
import sys
import threading
import time
import uuid

import zmq
from jupyter_client.session import Session

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capture")
KEY = b"fuzz-key"
MAX_CAPTURE = 100 * 1024

SIG = b"\xff" + b"\x00" * 8 + b"\x7f"


# ---------------------------------------------------------------- ZMTP helpers

def greeting(minor, as_server):
    g = SIG + bytes([3, minor]) + b"NULL".ljust(20, b"\0") + bytes([1 if as_server else 0]) + b"\0" * 31
    assert len(g) == 64
    return g


def frame(body, flags=0):
    if len(body) > 255:
        return bytes([flags | 0x02]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def command(name, data=b""):
    return frame(bytes([len(name)]) + name + data, flags=0x04)


def prop(name, value):
    return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value


def ready(socket_type):
    return command(b"READY", prop(b"Socket-Type", socket_type))


# ---------------------------------------------------------------- frame walker

class ParseError(Exception):
    pass


def walk(data):
    """Parse a client stream: 64-byte ZMTP 3.x greeting, then frames.

    Returns a summary dict; raises ParseError unless the stream ends exactly
    on a frame boundary."""
    if len(data) < 10 or data[0] != 0xFF or data[9] != 0x7F:
        raise ParseError("bad signature %s" % data[:10].hex())
    if len(data) < 11 or data[10] != 3:
        raise ParseError("major version %s" % (data[10] if len(data) > 10 else "missing"))
    if len(data) < 64:
        raise ParseError("short greeting (%d bytes)" % len(data))
    s = {
        "version": "%d.%d" % (data[10], data[11]),
        "mechanism": data[12:32].rstrip(b"\0").decode("ascii", "replace"),
        "as_server": data[32],
        "commands": [],
        "ready": None,
        "messages": 0,
        "frames": 0,
        "parts": [],  # number of frames of each message
        "max_frame": 0,
        "bytes": len(data),
    }
    pos, nparts = 64, 0
    while pos < len(data):
        flags = data[pos]
        if flags & 0xF8:
            raise ParseError("reserved flag bits 0x%02x at offset %d" % (flags, pos))
        if flags & 0x02:
            if pos + 9 > len(data):
                raise ParseError("truncated long size at offset %d" % pos)
            size = struct.unpack(">Q", data[pos + 1:pos + 9])[0]
            pos += 9
        else:
            if pos + 2 > len(data):
                raise ParseError("truncated short size at offset %d" % pos)
            size = data[pos + 1]
            pos += 2
        if size > len(data) - pos:
            raise ParseError("frame of %d bytes at offset %d overruns stream" % (size, pos))
        body = data[pos:pos + size]
        pos += size
        s["frames"] += 1
        s["max_frame"] = max(s["max_frame"], size)
        if flags & 0x04:
            if flags & 0x01:
                raise ParseError("command with MORE flag")
            if nparts:
                raise ParseError("command inside a multipart message")
            if not body or body[0] + 1 > len(body):
                raise ParseError("bad command name")
            name = body[1:1 + body[0]].decode("ascii", "replace")
            s["commands"].append(name)
            if name == "READY":
                s["ready"] = parse_props(body[1 + body[0]:])
            elif name == "PING":
                rest = body[1 + body[0]:]
                if len(rest) < 2:
                    raise ParseError("short PING")
                s.setdefault("ping_ttl_ds", struct.unpack(">H", rest[:2])[0])
                s.setdefault("ping_ctx", rest[2:].hex())
        else:
            nparts += 1
            if not flags & 0x01:
                s["messages"] += 1
                s["parts"].append(nparts)
                nparts = 0
    if nparts:
        raise ParseError("stream ends inside a multipart message (%d frames)" % nparts)
    return s


def parse_props(b):
    props, pos = {}, 0
    while pos < len(b):
        n = b[pos]
        if pos + 1 + n + 4 > len(b):
            raise ParseError("property name overruns READY")
        name = b[pos + 1:pos + 1 + n].decode("ascii", "replace")
        pos += 1 + n
        vlen = struct.unpack(">I", b[pos:pos + 4])[0]
        pos += 4
        if vlen > len(b) - pos:
            raise ParseError("property value overruns READY")
        props[name] = b[pos:pos + vlen]
        pos += vlen
    return props


def summary_line(name, s):
    cmds = {}
    for c in s["commands"]:
        cmds[c] = cmds.get(c, 0) + 1
    cmdtxt = ",".join("%s%s" % (k, "x%d" % v if v > 1 else "") for k, v in cmds.items()) or "-"
    ready_txt = "-"
    if s["ready"] is not None:
        ready_txt = ";".join("%s=%s" % (k, show(v)) for k, v in s["ready"].items())
    extra = ""
    if "ping_ttl_ds" in s:
        extra = " ping-ttl=%dds ping-ctx=%s" % (s["ping_ttl_ds"], s["ping_ctx"] or "''")
    return ("%-28s greeting %s %s as-server=%d | %d commands [%s] | %d messages (frames/msg %s) | "
            "%d frames, max frame %d | %d bytes | READY{%s}%s" % (
                name, s["version"], s["mechanism"], s["as_server"], len(s["commands"]), cmdtxt,
                s["messages"], compact_parts(s["parts"]), s["frames"], s["max_frame"], s["bytes"],
                ready_txt, extra))


def show(v):
    if not v:
        return "''"
    if v.isascii() and v.decode().isprintable():
        return v.decode()
    return "0x" + v.hex()


def compact_parts(parts):
    if not parts:
        return "-"
    if len(set(parts)) == 1 and len(parts) > 3:
        return "%dx%d" % (len(parts), parts[0])
    return ",".join(map(str, parts))


# ---------------------------------------------------------------- recorder

class Listener:
    """One listening socket; records every accepted connection."""

    def __init__(self, kind, minor, peer_type):
        self.kind = kind
        self.hello = greeting(minor, as_server=True) + ready(peer_type)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.conns = []  # [(bytearray, thread)]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            buf = bytearray()
            t = threading.Thread(target=self._record, args=(c, buf), daemon=True)
            self.conns.append((buf, t))
            t.start()

    def _record(self, c, buf):
        c.settimeout(None)
        c.sendall(self.hello)
        try:
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                buf += chunk
        except ConnectionResetError:
            buf += b""  # client reset instead of FIN; keep what arrived
            print("  note: %s connection reset by client" % self.kind)
        c.close()

    def finish(self, timeout=5.0):
        """Wait for all client connections to reach EOF; return their streams."""
        deadline = time.time() + timeout
        for _, t in list(self.conns):
            t.join(max(0.0, deadline - time.time()))
            if t.is_alive():
                raise SystemExit("FATAL: %s connection still open %.0fs after the client closed"
                                 % (self.kind, timeout))
        self.stop.set()
        self.thread.join()
        self.sock.close()
        return [bytes(b) for b, _ in self.conns]


def addr(listener):
    return "tcp://127.0.0.1:%d" % listener.port


def new_session():
    return Session(key=KEY, signature_scheme="hmac-sha256", username="fuzz")


def closing(ctx, *socks):
    for s in socks:
        s.close(linger=1000)
    ctx.term()


# ---------------------------------------------------------------- scenarios

def sc_shell(minor):
    lis = Listener("shell", minor, b"ROUTER")
    sess = new_session()
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.IDENTITY, sess.bsession)
    s.connect(addr(lis))
    sess.send(s, "kernel_info_request", {})
    sess.send(s, "execute_request", {
        "code": "print('hi')", "silent": False, "store_history": True,
        "user_expressions": {}, "allow_stdin": True, "stop_on_error": True})
    sess.send(s, "complete_request", {"code": "pri", "cursor_pos": 3})
    sess.send(s, "inspect_request", {"code": "print", "cursor_pos": 5, "detail_level": 0})
    sess.send(s, "history_request", {"output": False, "raw": True, "hist_access_type": "tail", "n": 10})
    rnd = random.Random(20240607)
    sess.send(s, "comm_msg", {"comm_id": uuid.uuid4().hex, "data": {"method": "custom"}},
              buffers=[b"\x00\x01\x02" * 100, rnd.randbytes(70000)])
    closing(ctx, s)
    return {"shell": lis.finish()}


def sc_control(minor):
    lis = Listener("control", minor, b"ROUTER")
    sess = new_session()
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.connect(addr(lis))
    sess.send(s, "kernel_info_request", {})
    sess.send(s, "interrupt_request", {})
    sess.send(s, "shutdown_request", {"restart": True})
    closing(ctx, s)
    return {"control": lis.finish()}


def sc_stdin(minor):
    lis = Listener("stdin", minor, b"ROUTER")
    sess = new_session()
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.IDENTITY, sess.bsession)
    s.connect(addr(lis))
    sess.send(s, "input_reply", {"value": "fuzz"})
    closing(ctx, s)
    return {"stdin": lis.finish()}


def sc_iopub(minor):
    lis = Listener("iopub", minor, b"PUB")
    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    s.connect(addr(lis))
    s.setsockopt(zmq.SUBSCRIBE, b"")
    time.sleep(0.2)
    s.setsockopt(zmq.SUBSCRIBE, b"kernel.")
    time.sleep(0.2)
    s.setsockopt(zmq.UNSUBSCRIBE, b"kernel.")
    time.sleep(0.2)
    closing(ctx, s)
    return {"iopub": lis.finish()}


def sc_hb(minor):
    lis = Listener("hb", minor, b"ROUTER")
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.connect(addr(lis))
    s.send(b"ping")
    closing(ctx, s)
    return {"hb": lis.finish()}


def sc_heartbeat(minor):
    lis = Listener("heartbeat", minor, b"ROUTER")
    sess = new_session()
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.HEARTBEAT_IVL, 50)
    s.setsockopt(zmq.HEARTBEAT_TTL, 500)
    s.setsockopt(zmq.HEARTBEAT_TIMEOUT, 1000)
    s.connect(addr(lis))
    time.sleep(0.3)
    sess.send(s, "kernel_info_request", {})
    closing(ctx, s)
    return {"heartbeat": lis.finish()}


def sc_client(minor):
    from jupyter_client.blocking import BlockingKernelClient
    from jupyter_client.connect import write_connection_file

    peer = {"shell": b"ROUTER", "iopub": b"PUB", "stdin": b"ROUTER", "control": b"ROUTER", "hb": b"ROUTER"}
    lis = {k: Listener("client-" + k, minor, t) for k, t in peer.items()}
    cf = os.path.join(OUT, ".capture-connection.json")
    try:
        write_connection_file(
            cf, ip="127.0.0.1", transport="tcp", key=KEY, signature_scheme="hmac-sha256",
            shell_port=lis["shell"].port, iopub_port=lis["iopub"].port, stdin_port=lis["stdin"].port,
            control_port=lis["control"].port, hb_port=lis["hb"].port)
        import zmq.asyncio
        ctx = zmq.asyncio.Context()  # the type jupyter_client 7 uses itself
        kc = BlockingKernelClient(context=ctx)
        kc.load_connection_file(cf)
        kc.start_channels()
        kc.kernel_info()
        kc.execute("1+1")
        time.sleep(0.5)
        kc.stop_channels()
        ctx.term()
    finally:
        if os.path.exists(cf):
            os.unlink(cf)
    return {"client-" + k: l.finish() for k, l in lis.items()}


SCENARIOS = [
    # (function, minors)
    (sc_shell, (0, 1)),
    (sc_control, (0, 1)),
    (sc_stdin, (0, 1)),
    (sc_iopub, (0, 1)),
    (sc_hb, (0, 1)),
    (sc_heartbeat, (0, 1)),
]


# ---------------------------------------------------------------- hostile

def hostile():
    g = greeting(0, as_server=False)
    dealer = ready(b"DEALER")
    ping = command(b"PING", struct.pack(">H", 10))
    out = {}
    out["hostile-bigframe"] = g + dealer + b"\x02" + struct.pack(">Q", 2 ** 62) + b"A" * 16
    out["hostile-ready-overrun"] = g + frame(
        b"\x05READY" + bytes([200]) + b"Socket-Type" + struct.pack(">I", 6) + b"DEALER", 0x04)
    out["hostile-value-overrun"] = g + frame(
        b"\x05READY" + b"\x0bSocket-Type" + b"\xff\xff\xff\xff" + b"DEALER", 0x04)
    out["hostile-cmd-more"] = g + dealer + frame(b"\x04PING\x00\x0a", 0x05) + frame(b"x")
    out["hostile-zmtp2"] = (b"\xff" + b"\x00" * 7 + b"\x01" + b"\x7f"  # v1/v2 signature
                            + b"\x01" + b"\x05"  # revision 1 (ZMTP 2.0), socket type DEALER
                            + b"\x00\x00"  # empty identity frame (final, size 0)
                            + b"\x00\x05hello")  # one ZMTP 2.0 message frame
    out["hostile-badsig"] = b"\xfe" + g[1:] + dealer
    out["hostile-reserved-flags"] = g + dealer + bytes([0xF8, 5]) + b"hello"
    out["hostile-pingflood"] = g + dealer + ping * 1000
    out["hostile-subflood"] = g + ready(b"SUB") + b"".join(
        frame(b"\x01topic-%05d" % i) for i in range(5000))
    out["hostile-many-frames"] = g + dealer + b"\x01\x00" * 99999 + b"\x00\x00"
    out["hostile-huge-ready"] = g + b"\x06" + struct.pack(">Q", 1 << 30) + (
        b"\x05READY" + prop(b"Socket-Type", b"DEALER") + b"\x00" * 100)[:100]
    return out


# ---------------------------------------------------------------- main

def write(name, data):
    with open(os.path.join(OUT, name + ".bin"), "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hostile-only", action="store_true", help="only regenerate hostile-*.bin")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    print("pyzmq %s, libzmq %s" % (zmq.pyzmq_version(), zmq.zmq_version()))

    failed = False
    if not args.hostile_only:
        runs = [(fn, m) for fn, minors in SCENARIOS for m in minors] + [(sc_client, 0)]
        for fn, minor in runs:
            for kind, streams in fn(minor).items():
                if not streams:
                    raise SystemExit("FATAL: %s (server 3.%d): client never connected" % (kind, minor))
                for i, data in enumerate(streams):
                    if kind.startswith("client-"):
                        name = kind
                    else:
                        name = "%s-zmtp3%d" % (kind, minor)
                    if i:
                        name += "-%d" % (i + 1)
                        print("  note: %s: reconnect, extra connection #%d" % (kind, i + 1))
                    if not data.startswith(b"\xff") or len(data) < 10 or data[9] != 0x7F:
                        raise SystemExit("FATAL: %s does not start with the ZMTP signature: %r"
                                         % (name, data[:16]))
                    if len(data) > MAX_CAPTURE:
                        raise SystemExit("FATAL: %s is %d bytes (> %d)" % (name, len(data), MAX_CAPTURE))
                    write(name, data)
                    try:
                        s = walk(data)
                    except ParseError as e:
                        print("FAIL %s: %s" % (name, e))
                        failed = True
                        continue
                    print(summary_line(name + ".bin", s))

    for name, data in sorted(hostile().items()):
        write(name, data)
        try:
            s = walk(data)
            print(summary_line(name + ".bin", s))
        except ParseError as e:
            print("%-28s %d bytes | rejected: %s" % (name + ".bin", len(data), e))

    if failed:
        raise SystemExit("FATAL: some captures did not parse to the end")


if __name__ == "__main__":
    main()
