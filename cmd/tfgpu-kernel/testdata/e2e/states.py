"""Drives one tfgpu kernel through its states, for identity_test.go (issue 32,
item 8), run as the kernel's owner, a real user. The test says what to do
next on stdin, one command a line, and reads one JSON line on stdout for
each: {"ok": true, ...} or {"ok": false, "error": "..."}. Everything else
(jupyter_client's logging, tracebacks) goes to stderr; the supervisor's
output goes to E2E_TMP/kernel.log.

A real jupyter_client KernelManager starts the kernelspec E2E_KERNEL
("tfgpu") with the connection file E2E_TMP/kernel-E2E_KERNEL_ID.json, as
jupyter_server names it. Commands:

  start [gated]     launch the kernel; "gated": its Python waits, before it
                    imports anything of Jupyter's, until open-gate (a
                    sitecustomize on PYTHONPATH, E2E_GATE_PATH, that waits
                    for the file E2E_TMP/gate), so the test can see the
                    kernel starting; the gate stays open after, so a spare
                    never waits
  open-gate         open it
  ready             connect a client and wait until the kernel answers
  info              the launched process, the record's supervisor and
                    kernel, and the waiting spare (no cell is run)
  kernel-pid        run a cell that prints the kernel's pid (a parked
                    kernel's next cell starts a fresh kernel)
  wait-spare [PID]  wait for a spare (another than PID) and its standby
  restart           Restart, as a notebook's Kernel menu does
  crash             a cell that os._exit(1)s; then jupyter_client's
                    KernelRestarter restarts it, as the server's would
  kill-supervisor   SIGKILL the supervisor the record names, then the same
  execute JSON      run the cell JSON (a JSON string)
  shutdown          shut the kernel down
  quit              end (as stdin's end does), stopping what is left
"""

import json
import os
import signal
import sys
import time
import traceback

from jupyter_client import KernelManager

import harness as h

# The answers go to the real stdout; anything else printed, to stderr.
OUT = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)

KERNEL_ID = os.environ["E2E_KERNEL_ID"]
GATE = os.path.join(h.TMP, "gate")


class Kernel:
    km = None
    kc = None


K = Kernel()


def record():
    st = h.kernel_record(K.km) if K.km else None
    return st or {}


def spare_record():
    try:
        with open(os.path.join(h.state_dir(), KERNEL_ID + ".spare")) as f:
            sp = json.load(f)
    except (OSError, ValueError):
        return None
    if sp.get("off") or not h.alive(sp.get("pid", 0)) or not h.alive(sp.get("standby_pid", 0)):
        return None
    return {"pid": sp["pid"], "standby_pid": sp["standby_pid"]}


def info():
    st = record()
    return {"launched": K.km.provisioner.pid if K.km and K.km.provisioner else 0,
            "supervisor": st.get("supervisor_pid", 0), "kernel": st.get("kernel_pid", 0),
            "phase": st.get("phase", ""), "spare": spare_record()}


def start(how=""):
    if how != "gated":
        open(GATE, "w").close()
    gate_path = os.environ["E2E_GATE_PATH"]
    os.environ["E2E_GATE"] = GATE
    os.environ["PYTHONPATH"] = gate_path + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    conn = os.path.join(h.TMP, "kernel-%s.json" % KERNEL_ID)
    km = KernelManager(kernel_name=h.KERNEL, connection_file=conn)
    km.e2e_log = os.path.join(h.TMP, "kernel.log")
    logf = open(km.e2e_log, "ab")
    km.start_kernel(stdout=logf, stderr=logf)  # restarts reuse them: keep logf open
    km.e2e_logf = logf
    h._KMS.append(km)
    h.track(km.provisioner.pid)
    K.km = km
    return info()


def open_gate():
    open(GATE, "w").close()
    return {}


def ready():
    K.kc = h.connect(K.km)
    return info()


def kernel_pid():
    return dict(info(), kernel=h.kernel_pid(K.kc))


def wait_spare(other="0", timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sp = spare_record()
        if sp and sp["pid"] != int(other):
            h.track(sp["pid"], sp["standby_pid"])
            return info()
        time.sleep(0.05)
    raise AssertionError("no spare kernel (other than %s) within %ss" % (other, timeout))


def restart():
    K.km.restart_kernel()
    K.kc.stop_channels()
    K.kc = h.connect(K.km)
    return info()


def died(what, timeout=30):
    """Wait for the launched process to end, then restart as the server's
    KernelRestarter does."""
    deadline = time.monotonic() + timeout
    while K.km.is_alive():
        if time.monotonic() > deadline:
            raise AssertionError("the kernel is alive %ss after %s" % (timeout, what))
        time.sleep(0.05)
    K.kc = h.autorestart(K.km, K.kc, "after " + what, track_kernel=False)
    return info()


def crash():
    K.kc.execute("import os; os._exit(1)")
    return died("os._exit(1)")


def kill_supervisor():
    sup = record().get("supervisor_pid", 0)
    if not sup or not h.alive(sup):
        raise AssertionError("no live supervisor in the record: %s" % record())
    os.kill(sup, signal.SIGKILL)
    return dict(died("its supervisor's SIGKILL"), killed=sup)


def execute(code):
    r = h.execute(K.kc, json.loads(code), timeout=60)
    reply = r["reply"] or {}
    return {"status": r["status"], "stdout": r["stdout"], "stderr": r["stderr"],
            "ename": reply.get("ename", ""), "evalue": reply.get("evalue", "")}


def shutdown():
    K.km.shutdown_kernel()
    return {"alive": K.km.is_alive()}


COMMANDS = {"start": start, "open-gate": open_gate, "ready": ready, "info": info, "kernel-pid": kernel_pid,
            "wait-spare": wait_spare, "restart": restart, "crash": crash, "kill-supervisor": kill_supervisor,
            "execute": execute, "shutdown": shutdown}


def main():
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "quit":
            break
        h.log("states.py:", cmd, arg[:80])
        try:
            if cmd not in COMMANDS:
                raise ValueError("unknown command %r" % cmd)
            res = COMMANDS[cmd](*([arg] if arg else []))
            res = dict(res, ok=True)
        except Exception as e:
            h.log(traceback.format_exc())
            res = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        OUT.write(json.dumps(res, default=str) + "\n")
    try:
        h._cleanup()
    except Exception as e:
        h.log("cleanup: %r" % e)


main()
