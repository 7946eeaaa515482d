"""A kernel of Jupyter Enterprise Gateway, driven through JupyterLab (issue 36).

TestE2EGateway (e2e_gateway_test.go) starts Enterprise Gateway 3.x, whose
LocalProcessProxy launches the kernels, and a JupyterLab server started with
--gateway-url pointing at it; this script is the browser: it speaks only to
the Lab server, over its REST API and its kernel websocket
(/api/kernels/<id>/channels, Jupyter's JSON messages), as JupyterLab's
front end does. The Lab server forwards each request to the gateway.

E2E_ROUNDS times, for the kernelspec E2E_KERNEL:

  start      POST /api/kernels; the websocket opened; start_s is until the
             first kernel_info_reply.
  escape     a cell starts a setsid'd double-forked daemon (ESCAPE).
  interrupt  a cell sleeping 60 s, once it said so; POST .../interrupt: the cell
             ends with KeyboardInterrupt (interrupt_s: the POST until the
             reply), and the kernel answers 6*7.
  restart    POST .../restart (restart_s); a new websocket, as Lab opens
             after a restart, and the first cell runs in a new kernel
             process (first_cell_after_restart_s: from the POST's return
             through the websocket's opening to the cell's execute_reply). The old kernel and the daemon are gone (waited
             for, at most harness.GONE_WAIT).
  shutdown   the daemon again, then DELETE /api/kernels/<id> (shutdown_s):
             every process that carries the kernel's KERNEL_ID (the gateway
             puts it in the kernel's environment: supervisor, watcher,
             standby, spare, kernel, daemon) is gone, and `tfgpu-kernel ps
             --json` and TFGPU_STATE_DIR hold nothing of the kernel (each
             waited for, at most harness.GONE_WAIT).

On the stock kernelspec (E2E_WRAPPED=0) whether the daemon outlives the
restart and the shutdown is noted (waited for 2 s, harness.TREE_WAIT;
daemon_survived_restart and _shutdown count the rounds it did), not
asserted, and the survivors are killed before the next step. Every figure
is noted per round and as the median of the rounds ("median_" + name).
"""

import json
import os
import signal
import statistics
import subprocess
import time
import uuid

import websocket  # websocket-client, in the current stack

import harness as h

LAB = os.environ["E2E_LAB_URL"]
TOKEN = os.environ["E2E_LAB_TOKEN"]
BIN = os.environ["E2E_TFGPU_BIN"]
STATE = os.environ["TFGPU_STATE_DIR"]  # the supervisors' (the gateway passes it on)
ROUNDS = int(os.environ.get("E2E_ROUNDS", "3"))

# A cell that starts a setsid'd double-forked daemon ignoring SIGINT, SIGTERM
# and SIGHUP: outside the kernel's process group and session, reparented
# away from the kernel. harness.SPAWN_CHILDREN's, without its SIGTERM-ignoring
# child in the kernel's group: with it the stock kernel's restart and
# shutdown took 2.6 s here instead of 0.1 s, a figure about that child, not
# about the gateway. Prints "E2E-PIDS {kernel, daemon}".
ESCAPE = r'''
import json as _json, os as _os, subprocess as _sp, sys as _sys
_e2e_p = _sp.Popen([_sys.executable, "-c", """
import os, signal, time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)
print(os.getpid(), flush=True)
n = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2): os.dup2(n, fd)
time.sleep(3600)
"""], stdin=_sp.DEVNULL, stdout=_sp.PIPE, stderr=_sp.DEVNULL)
_e2e_daemon = int(_e2e_p.stdout.readline())
_e2e_p.stdout.close()
_e2e_p.wait()
print("E2E-PIDS " + _json.dumps({"kernel": _os.getpid(), "daemon": _e2e_daemon}))
'''


# ------------------------------------------------------------ the Lab server


def rest(method, path, body=None, timeout=60):
    """One request to the Lab server; returns (HTTP status, parsed body or None)."""
    return h.http(method, LAB + path, TOKEN, body, timeout)


class Channels:
    """The kernel websocket, as JupyterLab opens it: one connection for all
    channels, each message a JSON text frame with its "channel"."""

    def __init__(self, kid):
        self.session = uuid.uuid4().hex
        url = LAB.replace("http://", "ws://") + "/api/kernels/%s/channels?session_id=%s" % (kid, self.session)
        self.ws = websocket.create_connection(url, header=["Authorization: token " + TOKEN], timeout=h.GONE_WAIT)

    def send(self, channel, msg_type, content):
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": msg_type, "username": "e2e", "session": self.session,
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content, "channel": channel, "buffers": []}))
        return msg_id

    def recv(self, timeout):
        """The next message, or None when none came within timeout."""
        self.ws.settimeout(max(timeout, 0.01))
        try:
            return json.loads(self.ws.recv())
        except websocket.WebSocketTimeoutException:
            return None

    def ready(self, timeout=60):
        """kernel_info_request, again each second, until one is answered."""
        t0, sent = time.monotonic(), set()
        while time.monotonic() - t0 < timeout:
            sent.add(self.send("shell", "kernel_info_request", {}))
            end = time.monotonic() + 1
            while time.monotonic() < end:
                m = self.recv(end - time.monotonic())
                if m and m["msg_type"] == "kernel_info_reply" and m["parent_header"].get("msg_id") in sent:
                    return time.monotonic() - t0
        raise AssertionError("the kernel did not answer kernel_info through the Lab server within %ss" % timeout)

    def execute(self, code, timeout=60, printed=None, need_idle=True, user_expressions=None):
        """Run code; returns {"reply", "stdout", "result", "idle",
        "replied_at"} once the execute_reply (and, with need_idle, the idle
        status) are in. printed: (marker, f): f() is called once, when the
        cell's stdout holds marker."""
        t0 = time.monotonic()
        msg_id = self.send("shell", "execute_request", {"code": code, "silent": False, "store_history": False,
                                                        "user_expressions": user_expressions or {},
                                                        "allow_stdin": False, "stop_on_error": False})
        r = {"reply": None, "stdout": "", "result": None, "idle": False}
        while time.monotonic() - t0 < timeout and not (r["reply"] and (r["idle"] or not need_idle)):
            m = self.recv(t0 + timeout - time.monotonic())
            if not m or m["parent_header"].get("msg_id") != msg_id:
                continue
            t, c = m["msg_type"], m["content"]
            if t == "execute_reply":
                r["reply"], r["replied_at"] = c, time.monotonic()
            elif t == "stream" and c.get("name") == "stdout":
                r["stdout"] += c["text"]
                if printed and printed[0] in r["stdout"]:
                    printed[1]()
                    printed = None
            elif t == "execute_result":
                r["result"] = c["data"].get("text/plain")
            elif t == "status" and c["execution_state"] == "idle":
                r["idle"] = True
        assert r["reply"] is not None, "no execute_reply within %ss to %r (stdout %r)" % (timeout, code[:60], r["stdout"][-300:])
        assert r["idle"] or not need_idle, "no idle status within %ss for %r (stdout %r)" % (timeout, code[:60], r["stdout"][-300:])
        return r

    def wait_iopub(self, timeout=h.GONE_WAIT):
        """A subscription to a kernel's iopub lands some time after the
        websocket opens (the gateway's SUB socket), and what the kernel
        publishes before that is lost: empty cells until one's idle status
        arrives, so that later cells' output is not racing it."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.execute("", timeout=timeout, need_idle=False)["idle"] or self.recv_idle(0.5):
                return
        raise AssertionError("iopub delivered no status through the Lab server within %ss" % timeout)

    def recv_idle(self, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = self.recv(end - time.monotonic())
            if m and m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                return True
        return False

    def close(self):
        self.ws.close()


def ok(r, what):
    assert r["reply"]["status"] == "ok", "%s: %s %s" % (what, r["reply"].get("ename"), r["reply"].get("evalue"))
    return r


# ------------------------------------------------------------ processes


def with_kernel_id(kid):
    """Live processes whose environment carries the gateway's KERNEL_ID=kid."""
    want = ("KERNEL_ID=%s" % kid).encode() + b"\0"
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                env = f.read()
        except OSError:
            continue
        if (env.startswith(want) or b"\0" + want in env) and h.alive(int(d)):
            out.append(int(d))
    return sorted(out)


def records(kid):
    """What the supervisors' state directory and `ps --json` hold of kid."""
    left = [n for n in os.listdir(STATE) if kid in n] if os.path.isdir(STATE) else []
    out = subprocess.run([BIN, "ps", "--json"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, "tfgpu-kernel ps --json: exit %d: %s" % (out.returncode, out.stderr)
    rows = [r for r in json.loads(out.stdout) if r.get("kernel_id") == kid]
    return left + ["ps row %s" % r.get("state") for r in rows]


def gone_or_noted(pids, what):
    """Wait for pids to be gone: asserted on tfgpu (at most GONE_WAIT),
    noted on stock (2 s, TREE_WAIT), whose survivors are then killed (and
    reaped by the test binary, the subreaper they were reparented to).
    Returns what survived and the seconds until all were gone (None then)."""
    left, took = h.wait_gone(lambda: h.survivors(pids), timeout=h.TREE_WAIT)
    h.check(not left, "%s: survived: %s" % (what, h.describe(left)))
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not h.wait_dead(left, h.GONE_WAIT), "%s: SIGKILLed survivors still alive" % what
    return left, None if left else round(took, 3)


def spawn_escapee(ch, what):
    r = ok(ch.execute(ESCAPE), what)
    line = [l for l in r["stdout"].splitlines() if l.startswith("E2E-PIDS ")]
    assert line, "%s printed %r" % (what, r["stdout"])
    pids = json.loads(line[0][len("E2E-PIDS "):])
    h.track(*pids.values())
    assert h.alive(pids["daemon"]), "%s: the daemon is not running" % what
    return pids


# ------------------------------------------------------------ one round


def one_round(n, figures):
    fig, note = {}, {}
    t0 = time.monotonic()
    code, model = rest("POST", "/api/kernels", {"name": h.KERNEL})
    assert code == 201 and model.get("name") == h.KERNEL, "POST /api/kernels: %s %s" % (code, model)
    kid = model["id"]
    ch = Channels(kid)
    ch.ready()
    fig["start_s"] = time.monotonic() - t0
    ch.wait_iopub()
    h.track(*with_kernel_id(kid))
    assert with_kernel_id(kid), "no process carries KERNEL_ID=%s: does the gateway set it?" % kid

    # The escapee, then an interrupt of a sleeping cell.
    kids = spawn_escapee(ch, "round %d: the escapee" % n)
    note["tree"] = h.describe(with_kernel_id(kid))
    # Once the cell says it is about to sleep, an interrupt is a
    # KeyboardInterrupt of the cell, in time.sleep or just before it.
    sent = []
    r = ch.execute("import time\nprint('SLEEPING', flush=True)\ntime.sleep(60)", timeout=h.GONE_WAIT,
                   printed=("SLEEPING", lambda: (sent.append(time.monotonic()), rest("POST", "/api/kernels/%s/interrupt" % kid))))
    assert sent, "the sleeping cell never said it sleeps"
    assert r["reply"]["status"] == "error" and r["reply"].get("ename") == "KeyboardInterrupt", (
        "interrupt: the sleeping cell ended %s %s" % (r["reply"]["status"], r["reply"].get("ename")))
    fig["interrupt_s"] = r["replied_at"] - sent[0]
    assert ok(ch.execute("6*7"), "after the interrupt")["result"] == "42", "6*7 after the interrupt"

    # Restart, and the first cell after it on a new websocket.
    ch.close()
    t1 = time.monotonic()
    code, _ = rest("POST", "/api/kernels/%s/restart" % kid)
    assert code == 200, "POST restart: HTTP %s" % code
    fig["restart_s"] = time.monotonic() - t1
    t2 = time.monotonic()
    ch = Channels(kid)
    # Its pid comes in the execute_reply (shell), not on iopub, whose
    # subscription may not have landed yet.
    r = ok(ch.execute("import os", timeout=h.GONE_WAIT, need_idle=False, user_expressions={"pid": "os.getpid()"}),
           "first cell after the restart")
    fig["first_cell_after_restart_s"] = r["replied_at"] - t2
    new_kernel = int(r["reply"]["user_expressions"]["pid"]["data"]["text/plain"])
    assert new_kernel != kids["kernel"], "the first cell after the restart ran in the old kernel %d" % new_kernel
    left, note["restart_old_gone_s"] = gone_or_noted(list(kids.values()), "restart round %d" % n)
    note["daemon_survived_restart"] = kids["daemon"] in left
    ch.wait_iopub()
    assert ok(ch.execute("6*7"), "the new kernel")["result"] == "42", "6*7 in the new kernel"

    # Shutdown.
    kids = spawn_escapee(ch, "round %d: the escapee again" % n)
    family = sorted(set(with_kernel_id(kid)) | set(kids.values()))
    h.track(*family)
    ch.close()
    t3 = time.monotonic()
    code, _ = rest("DELETE", "/api/kernels/%s" % kid)
    assert code == 204, "DELETE /api/kernels/%s: HTTP %s" % (kid, code)
    fig["shutdown_s"] = time.monotonic() - t3
    left, note["shutdown_gone_s"] = gone_or_noted(family, "shutdown round %d" % n)
    note["daemon_survived_shutdown"] = kids["daemon"] in left
    if h.WRAPPED:
        left, _ = h.wait_gone(lambda: with_kernel_id(kid))
        assert not left, "shutdown round %d: processes of the kernel left: %s" % (n, h.describe(left))
        left, took = h.wait_gone(lambda: records(kid))
        assert not left, "shutdown round %d: records of the kernel left: %s" % (n, left)
        note["records_gone_s"] = round(took, 3)
    code, _ = rest("GET", "/api/kernels/%s" % kid)
    assert code == 404, "GET /api/kernels/%s after DELETE: HTTP %s" % (kid, code)

    for k, v in fig.items():
        figures.setdefault(k, []).append(round(v, 3))
    h.note(**{"round_%d" % n: dict(note, **{k: round(v, 3) for k, v in fig.items()})})
    for k in ("daemon_survived_restart", "daemon_survived_shutdown"):
        h.FACTS[k] = h.FACTS.get(k, 0) + note[k]


def main():
    code, specs = rest("GET", "/api/kernelspecs")
    assert code == 200 and h.KERNEL in specs["kernelspecs"], "the Lab server (from the gateway) lists %s" % (
        sorted(specs["kernelspecs"]) if code == 200 else code)
    h.note(kernelspecs=sorted(specs["kernelspecs"]))
    figures = {}
    for n in range(ROUNDS):
        one_round(n, figures)
    h.note(figures=figures, **{"median_" + k: round(statistics.median(v), 3) for k, v in figures.items()})


if __name__ == "__main__":
    h.run(main)
