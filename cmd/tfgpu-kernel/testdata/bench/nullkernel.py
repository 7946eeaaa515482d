"""The null kernel: the least a Jupyter kernel can be (pyzmq, no IPython),
for the floor of restart_kernel + wait_for_ready on a machine. It answers
kernel_info_request (with busy/idle on iopub), shutdown_request (then it
exits at once) and heartbeats, and greets each iopub subscriber with a
status (as ipykernel 7's iopub welcome does: wait_for_ready wants an iopub
message after its kernel_info_reply); nothing else. What jupyter_client itself
waits for in a restart (its 0.1 s poll of the old process, its 0.2 s of
iopub silence at the end of wait_for_ready) is then most of what is left.

    python nullkernel.py -f CONNECTION_FILE
"""

import datetime
import hashlib
import hmac
import json
import os
import signal
import sys
import uuid

import zmq

signal.signal(signal.SIGINT, signal.SIG_IGN)  # jupyter_client interrupts before a shutdown
cf = json.load(open(sys.argv[sys.argv.index("-f") + 1]))
key = cf["key"].encode()
ctx = zmq.Context()


def bind(kind, name):
    s = ctx.socket(kind)
    s.bind("%s://%s:%d" % (cf["transport"], cf["ip"], cf[name + "_port"]))
    return s


shell, control, iopub = bind(zmq.ROUTER, "shell"), bind(zmq.ROUTER, "control"), bind(zmq.XPUB, "iopub")
stdin, hb = bind(zmq.ROUTER, "stdin"), bind(zmq.REP, "hb")
session = str(uuid.uuid4())


def send(sock, idents, msg_type, content, parent):
    header = {"msg_id": str(uuid.uuid4()), "msg_type": msg_type, "session": session, "username": "null",
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": "5.3"}
    parts = [json.dumps(p).encode() for p in (header, parent, {}, content)]
    sig = hmac.new(key, b"".join(parts), hashlib.sha256).hexdigest().encode()
    sock.send_multipart(idents + [b"<IDS|MSG>", sig] + parts)


def status(state, parent):
    send(iopub, [b"kernel.null.status"], "status", {"execution_state": state}, parent)


INFO = {"status": "ok", "protocol_version": "5.3", "implementation": "null", "implementation_version": "1",
        "language_info": {"name": "python", "version": sys.version.split()[0], "mimetype": "text/x-python",
                          "file_extension": ".py"}, "banner": "null kernel"}
poller = zmq.Poller()
for s in (shell, control, hb, iopub):
    poller.register(s, zmq.POLLIN)
while True:
    for sock, _ in poller.poll():
        if sock is hb:
            hb.send(hb.recv())
            continue
        if sock is iopub:
            if iopub.recv()[:1] == b"\x01":  # a subscription
                status("idle", {})
            continue
        frames = sock.recv_multipart()
        i = frames.index(b"<IDS|MSG>")
        idents, header = frames[:i], json.loads(frames[i + 2])
        t = header["msg_type"]
        if t == "kernel_info_request":
            status("busy", header)
            send(sock, idents, "kernel_info_reply", INFO, header)
            status("idle", header)
        elif t == "shutdown_request":
            content = json.loads(frames[i + 5])
            send(sock, idents, "shutdown_reply", {"status": "ok", "restart": content.get("restart", False)}, header)
            ctx.destroy(linger=100)
            os._exit(0)
