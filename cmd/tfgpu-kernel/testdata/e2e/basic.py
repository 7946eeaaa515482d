"""Scenario 1: execute (stdout, stderr, display_data, execute_result, error),
complete, inspect, history, and a comm message carrying a 50 MB binary buffer
that arrives intact in both directions."""

import os
import queue
import time
import uuid

import harness as h

CODE = r"""
import sys
from IPython.display import display, HTML
print("hello stdout")
print("hello stderr", file=sys.stderr)
display(HTML("<b>shown</b>"))
6 * 7
"""

ECHO_TARGET = r"""
import hashlib
def _e2e_echo_target(comm, open_msg):
    @comm.on_msg
    def _recv(msg):
        b = bytes(msg["buffers"][0])
        comm.send({"len": len(b), "sha256": hashlib.sha256(b).hexdigest()}, buffers=[b])
get_ipython().kernel.comm_manager.register_target("e2e_echo", _e2e_echo_target)
"""

BUF_MB = 50


def main():
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))

    # execute: every output kind, in one cell
    r = h.ok(h.execute(kc, CODE), "execute")
    t = h.types(r)
    assert "hello stdout" in r["stdout"], "stdout stream missing: %r" % r["stdout"]
    assert "hello stderr" in r["stderr"], "stderr stream missing: %r" % r["stderr"]
    disp = [m for m in r["msgs"] if m["msg_type"] == "display_data"]
    assert disp and "text/html" in disp[0]["content"]["data"], "display_data missing: %s" % t
    res = [m for m in r["msgs"] if m["msg_type"] == "execute_result"]
    assert res and res[0]["content"]["data"]["text/plain"] == "42", "execute_result missing: %s" % t
    assert t[0] == "status" and t[-1] == "status", "iopub not bracketed by busy/idle: %s" % t

    # an error
    r = h.execute(kc, "1/0")
    assert r["status"] == "error" and r["reply"]["ename"] == "ZeroDivisionError", "error reply: %s" % r["reply"]
    errs = [m for m in r["msgs"] if m["msg_type"] == "error"]
    assert errs and errs[0]["content"]["ename"] == "ZeroDivisionError", "error iopub missing: %s" % h.types(r)

    # complete, inspect, history
    rep = kc.complete("import o", 8, reply=True, timeout=30)["content"]
    assert rep["status"] == "ok" and "os" in rep["matches"], "complete: %s" % rep
    rep = kc.inspect("print", 5, reply=True, timeout=30)["content"]
    assert rep["status"] == "ok" and rep["found"] and "text/plain" in rep["data"], "inspect: %s" % rep
    rep = kc.history(hist_access_type="tail", n=10, output=False, raw=True, reply=True, timeout=30)["content"]
    codes = [e[2] for e in rep.get("history", [])]
    assert rep["status"] == "ok" and "1/0" in codes, "history tail lacks 1/0: %s" % codes
    rep = h.shell_reply(kc, kc.is_complete("for i in range(3):"))["content"]
    assert rep["status"] == "incomplete", "is_complete: %s" % rep
    rep = kc.kernel_info(reply=True, timeout=30)["content"]
    assert rep["language_info"]["name"] == "python", "kernel_info: %s" % rep

    # comm with a 50 MB buffer: client -> kernel -> client
    h.ok(h.execute(kc, ECHO_TARGET), "register comm target")
    comm_id = uuid.uuid4().hex
    sess, sock = kc.session, kc.shell_channel.socket
    sess.send(sock, "comm_open", {"comm_id": comm_id, "target_name": "e2e_echo", "data": {}})
    data = os.urandom(BUF_MB << 20)
    want = h.sha256(data)
    t0 = time.monotonic()
    sess.send(sock, "comm_msg", {"comm_id": comm_id, "data": {"ping": 1}}, buffers=[data])
    got = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and got is None:
        try:
            m = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if m["msg_type"] == "comm_msg" and m["content"].get("comm_id") == comm_id:
            got = m
    assert got is not None, "no comm_msg echo within 60 s"
    d = got["content"]["data"]
    assert d["len"] == len(data) and d["sha256"] == want, "kernel received %s, sent len=%d sha256=%s" % (d, len(data), want)
    assert got["buffers"], "echo carried no buffer"
    back = bytes(got["buffers"][0])
    assert len(back) == len(data) and h.sha256(back) == want, "echoed buffer differs: len %d" % len(back)
    h.note(comm_50mb_round_trip_s=round(time.monotonic() - t0, 3))
    del data, back

    h.assert_answers(kc, "after comm")
    t0 = time.monotonic()
    km.shutdown_kernel()
    h.note(shutdown_s=round(time.monotonic() - t0, 3), shutdown_status=h.shutdown_status(km))


h.run(main)
