"""Scenario 7: many clients on one kernel. argv[1]:

second    a second client on the same connection file (jupyter console
          --existing) sees the first one's iopub and can execute; it
          disconnects and reconnects a few times.
stalled   a client that stops reading (a subprocess SIGSTOPped while the
          kernel prints 300 MiB) stalls neither the other client's output
          nor its replies; the supervisor's RSS stays < 160 MiB: each client's
          queue is bounded (8 MiB before it holds the kernel up or, stalled,
          loses messages; 64 MiB in any case), plus
          the Go heap's slack; unbounded queueing would hold the whole 300 MiB.
          Measured 44-109 MiB depending on load, 68-76 MiB since slow
          readers hold the kernel up instead of queueing.
session   two clients of one session (KernelManager.client() twice: the same
          session, hence the same routing identity on every channel), as
          Jupyter's own code makes them: the second is ready at once and
          both run cells at the same time, each getting its own replies
          and its own input_request, never the other's (stock ipykernel's
          ROUTER_HANDOVER gives the identity to the second, and the first
          loses its replies). Each reconnects (stop_channels,
          start_channels) and is answered at once.
heartbeat libzmq DEALERs with ZMQ_HEARTBEAT_IVL=100ms on shell, control and
          stdin: their ZMTP PINGs never reach the kernel (ipykernel would log
          "DELIM not in msg_list"), and requests on those sockets are answered. A
          canary non-Jupyter frame proves the log check is live.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import time

import zmq
import zmq.utils.monitor

import harness as h

MODE = sys.argv[1] if len(sys.argv) > 1 else "second"
SPEW_CHUNKS = 300
CHUNK = 1 << 20


def second(km, kc):
    kb = h.client_for(km.connection_file)
    for i in range(3):
        # A's output arrives on B's iopub, with A's request as parent.
        mid = kc.execute("print('from A %d')" % i)
        ra = h.collect(kc, mid)
        rb = h.collect(kb, mid, need_reply=False, timeout=15)
        assert "from A %d" % i in ra["stdout"], "A's own stdout: %r" % ra["stdout"]
        assert "from A %d" % i in rb["stdout"], "B did not see A's stdout on iopub: %s" % h.types(rb)
        # B executes; A sees it.
        mid = kb.execute("print('from B %d')" % i)
        rb = h.collect(kb, mid)
        ra = h.collect(kc, mid, need_reply=False, timeout=15)
        h.ok(rb, "B's execute")
        assert "from B %d" % i in rb["stdout"], "B's stdout: %r" % rb["stdout"]
        assert "from B %d" % i in ra["stdout"], "A did not see B's stdout: %s" % h.types(ra)
        # B goes away and comes back (console --existing, twice more)
        kb.stop_channels()
        kb = h.client_for(km.connection_file)
    h.assert_answers(kc, "A after B's reconnects")


def own_replies_only(kc, who, n, timeout=30):
    """Read kc's next n shell replies; each must answer a request kc sent.
    Two clients of one session make the same msg_ids (each copy of the
    Session counts from 0), so the reply's user_expressions say whose
    request it answers."""
    whose = []
    deadline = time.monotonic() + timeout
    while len(whose) < n and time.monotonic() < deadline:
        try:
            m = kc.get_shell_msg(timeout=0.2)
        except queue.Empty:
            continue
        assert m["content"]["status"] == "ok", "%s: %s" % (who, m["content"])
        whose.append(m["content"]["user_expressions"]["who"]["data"]["text/plain"])
    assert len(whose) == n, "%s: %d of its %d replies within %ss" % (who, len(whose), n, timeout)
    assert set(whose) == {repr(who)}, "%s got replies to %s" % (who, whose)


def session(km, kc):
    t0 = time.monotonic()
    kb = km.client()  # the same Session: the same identity on every channel
    assert kb.session.bsession == kc.session.bsession, "the two clients have different sessions"
    kb.start_channels()
    h._CLIENTS.append(kb)
    kb.wait_for_ready(timeout=30)
    h.note(second_ready_s=round(time.monotonic() - t0, 3))
    for i in range(3):
        # Both at once: A's cell runs longer, so B's reply comes first.
        kc.execute("import time; time.sleep(0.3); print('A %d')" % i, user_expressions={"who": "'A'"})
        kb.execute("print('B %d')" % i, user_expressions={"who": "'B'"})
        own_replies_only(kb, "B", 1)
        own_replies_only(kc, "A", 1)
    # From here B's msg_ids differ from A's, so that iopub tells them apart.
    kb.session.message_count += 1000000
    # input() from B's cell asks B, never A.
    mid = kb.execute("x = input('who? '); print('got', x)", allow_stdin=True)
    r = h.collect(kb, mid, stdin_answer="B's answer")
    h.ok(r, "B's input cell")
    assert r["input_prompts"] == ["who? "], "B's input_request: %r" % r["input_prompts"]
    assert "got B's answer" in r["stdout"], r["stdout"]
    try:
        m = kc.get_stdin_msg(timeout=0.5)
        raise AssertionError("client A got B's %s" % m["msg_type"])
    except queue.Empty:
        pass
    # And from A's, A.
    r = h.execute(kc, "y = input('A? '); print('got', y)", allow_stdin=True, stdin_answer="A's answer")
    h.ok(r, "A's input cell")
    assert "got A's answer" in r["stdout"], r["stdout"]
    # Each goes away and comes back with the same identity (a new client
    # of the same session), is ready at once and answered, while the
    # other keeps working.
    clients = {"A": kc, "B": kb}
    for who in ("A", "B"):
        clients[who].stop_channels()
        t0 = time.monotonic()
        c = km.client()
        c.start_channels()
        h._CLIENTS.append(c)
        c.wait_for_ready(timeout=30)
        h.note(**{"reconnect_ready_s_" + who: round(time.monotonic() - t0, 3)})
        c.session.message_count += 2000000 * (who == "B")
        clients[who] = c
        other = clients["B" if who == "A" else "A"]
        h.ok(h.execute(other, "print('meanwhile')"), "the other client while %s reconnects" % who)
    for who, c in clients.items():
        c.execute("pass", user_expressions={"who": repr(who)})
        own_replies_only(c, who, 1)

SPEW = r"""
import sys, threading
def _e2e_spew():
    chunk = "x" * %d
    for _ in range(%d):
        sys.stdout.write(chunk + "\n")
        sys.stdout.flush()  # one 1 MiB stream message each, as a print loop makes
    print("SPEW-DONE", flush=True)
_e2e_t = threading.Thread(target=_e2e_spew)
_e2e_t.start()
""" % (CHUNK, SPEW_CHUNKS)

STALLED_CLIENT = r"""
import sys, time
from jupyter_client.blocking import BlockingKernelClient
kc = BlockingKernelClient(connection_file=sys.argv[1])
kc.load_connection_file()
kc.start_channels()
kc.wait_for_ready(timeout=30)
kc.execute("pass")
print("READY", flush=True)
time.sleep(600)
"""


def stalled(km, kc):
    sup = km.provisioner.pid
    s = h.spawn_helper([h.PY, "-c", STALLED_CLIENT, km.connection_file], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    line = s.stdout.readline()
    assert line.strip() == b"READY", "stalled client did not start: %r" % line
    os.kill(s.pid, signal.SIGSTOP)
    h.note(rss_kib_before=h.rss_kib(sup))

    t0 = time.monotonic()
    rss_max = 0
    r = h.ok(h.execute(kc, SPEW, timeout=30), "start the 300 MiB print")
    got = r["stdout"].count("x")  # what arrived before the cell's idle
    first_at = (time.monotonic() - t0) if got else None
    done_at = reply_at = None
    reply_before_done = False
    ping_id = None
    deadline = t0 + 90
    while time.monotonic() < deadline and (done_at is None or reply_at is None):
        r = h.rss_kib(sup) or 0
        rss_max = max(rss_max, r)
        if first_at is not None and ping_id is None:
            ping_id = kc.execute("1+1")
            ping_t0 = time.monotonic()
        if ping_id is not None and reply_at is None:
            try:
                m = kc.get_shell_msg(timeout=0.001)
                if m["parent_header"].get("msg_id") == ping_id:
                    reply_at = time.monotonic() - ping_t0
                    reply_before_done = done_at is None
                    h.note(spew_running_at_reply=reply_before_done, mib_received_at_reply=got >> 20)
            except queue.Empty:
                pass
        try:
            m = kc.get_iopub_msg(timeout=0.05)
        except queue.Empty:
            continue
        if m["msg_type"] == "stream" and m["content"]["name"] == "stdout":
            text = m["content"]["text"]
            got += text.count("x")
            if first_at is None:
                first_at = time.monotonic() - t0
            if "SPEW-DONE" in text:
                done_at = time.monotonic() - t0
    want = SPEW_CHUNKS * CHUNK
    h.note(first_output_s=first_at, spew_done_s=done_at, reply_1p1_s=reply_at, mib_received=got >> 20,
           supervisor_rss_max_kib=rss_max, rss_kib_after=h.rss_kib(sup), stalled_client_state=h.proc_state(s.pid))
    assert first_at is not None, "no stdout at all from the 300 MiB print within 90 s"
    assert reply_at is not None, "1+1 executed during the print got no reply within 90 s"
    assert reply_before_done, "1+1 during the print was answered only after the print ended (%.1f s): the stopped client stalls the others" % reply_at
    assert done_at is not None, "the 300 MiB print did not finish within 90 s (%d MiB received)" % (got >> 20)
    assert got == want, "received %d of %d bytes of the print" % (got, want)
    h.check(rss_max < 160 * 1024, "supervisor RSS reached %d MiB (>= 160 MiB)" % (rss_max >> 10))
    s.kill()
    s.wait(5)
    h.assert_answers(kc, "after the stopped client was killed")


def heartbeat(km, kc):
    info = km.get_connection_info()
    log = km.e2e_log

    def invalid_count():
        with open(log, "rb") as f:
            return f.read().count(b"DELIM not in msg_list")

    base = invalid_count()
    ctx = zmq.Context.instance()
    socks = {}
    for chan in ("shell", "control", "stdin"):
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.HEARTBEAT_IVL, 100)
        d.setsockopt(zmq.HEARTBEAT_TIMEOUT, 1000)
        d.setsockopt(zmq.LINGER, 0)
        d.connect("%s://%s:%d" % (info["transport"], info["ip"], info["%s_port" % chan]))
        socks[chan] = d
    mon = socks["shell"].get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECTED)
    time.sleep(1.5)  # ~15 PINGs on each connection
    for chan in ("shell", "control"):
        msg = kc.session.msg("kernel_info_request", {})
        kc.session.send(socks[chan], msg)
        assert socks[chan].poll(10000), "no kernel_info_reply on the heartbeating %s DEALER within 10 s" % chan
        _, reply = kc.session.feed_identities(socks[chan].recv_multipart())
        reply = kc.session.deserialize(reply)
        assert reply["msg_type"] == "kernel_info_reply" and reply["parent_header"]["msg_id"] == msg["header"]["msg_id"], "%s: %s" % (chan, reply["msg_type"])
    time.sleep(0.5)  # with the 1.5 s before: past HEARTBEAT_TIMEOUT (1 s), the timer a missing PONG trips
    events = []
    while mon.poll(0):
        events.append(zmq.utils.monitor.recv_monitor_message(mon)["event"])
    names = {zmq.EVENT_CONNECTED: "connected", zmq.EVENT_DISCONNECTED: "disconnected"}
    h.note(shell_dealer_events=[names.get(e, e) for e in events])
    h.check(events.count(zmq.EVENT_DISCONNECTED) == 0,
            "the heartbeating shell DEALER was disconnected (PONGs missing?): events %s" % [names.get(e, e) for e in events])
    h.assert_answers(kc, "while heartbeating DEALERs are connected")
    n = invalid_count() - base
    assert n == 0, "the kernel logged %d 'DELIM not in msg_list' errors: ZMTP PINGs reached it" % n
    # canary: a frame that is not a Jupyter message must reach the kernel
    # (relayed untouched) and be rejected, or the check above proves nothing.
    socks["shell"].send_multipart([b"E2E-CANARY-not-a-jupyter-message"])
    deadline = time.monotonic() + 10
    while invalid_count() - base == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    h.note(canary_seen=invalid_count() - base)
    assert invalid_count() - base >= 1, "canary frame never showed up as 'DELIM not in msg_list' in the kernel's log %s; cannot tell whether PINGs reached the kernel" % log
    for d in socks.values():
        d.close()
    mon.close()


def main():
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))
    {"second": second, "session": session, "stalled": stalled, "heartbeat": heartbeat}[MODE](km, kc)
    km.shutdown_kernel()
    h.note(shutdown_status=h.shutdown_status(km))


h.run(main)
