"""Shared helpers for the tfgpu-kernel end-to-end scenarios.

Every scenario is a script run by cmd/tfgpu-kernel/scenario_test.go with the
Python of a Jupyter stack (E2E_STACK): /usr/bin/python3 for "debian"
(jupyter_client 7.4.9, ipykernel 6.17), a venv built from
testdata/stacks/current.txt for "current" (jupyter_client 8.10, ipykernel
7.4). The contract between the two sides:

- environment in: E2E_KERNEL (kernelspec name, default "tfgpu"), E2E_WRAPPED
  ("1" when that kernelspec is the tfgpu-kernel supervisor, "0" for a stock
  kernelspec: wrapper-only expectations are then reported, not asserted),
  E2E_TMP (a scratch directory), E2E_TAG (inherited by every process the
  scenario creates, so the Go side can find survivors by environment);
- output: any lines, then exactly one final line "E2E-RESULT <json>" with
  {"ok": bool, "error": str, "pids": [int], "facts": {...}}. "pids" lists
  every process the scenario knows it created through a kernel (supervisor,
  kernel, children, setsid'd daemons); the Go side checks they are gone.

Run a scenario with run(main): main() asserts, FACTS collects figures, and
whatever happens every kernel and helper started here is stopped at the end.
"""

import faulthandler
import hashlib
import glob
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid

from jupyter_client import KernelManager
from jupyter_client.blocking import BlockingKernelClient

KERNEL = os.environ.get("E2E_KERNEL", "tfgpu")
WRAPPED = os.environ.get("E2E_WRAPPED", "1") == "1"
TMP = os.environ.get("E2E_TMP") or tempfile.mkdtemp(prefix="tfgpu-e2e-")
PY = sys.executable  # the stack's Python (E2E_STACK)

PIDS = []  # every process created through a kernel, for the survivor check
FACTS = {"kernel": KERNEL, "wrapped": WRAPPED}
_KMS = []  # kernel managers to stop at the end
_PROCS = []  # helper subprocesses to kill at the end
_CLIENTS = []


def log(*args):
    print("[%s]" % time.strftime("%H:%M:%S"), *args, file=sys.stderr, flush=True)


def track(*pids):
    for p in pids:
        if p and p not in PIDS:
            PIDS.append(int(p))


def note(**kw):
    FACTS.update(kw)


def check(cond, msg):
    """assert that holds only where the kernel is the tfgpu supervisor; on a
    stock kernel the outcome is recorded in FACTS['stock_differences']."""
    if WRAPPED:
        assert cond, msg
    elif not cond:
        FACTS.setdefault("stock_differences", []).append(msg)


# ---------------------------------------------------------------- processes


def proc_state(pid):
    """The state letter from /proc/PID/stat, or None when there is no such pid."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return s[s.rindex(")") + 2]


def alive(pid):
    """A zombie is dead: it holds no memory and no GPU context."""
    return proc_state(pid) not in (None, "Z", "X")


def survivors(pids):
    return [p for p in pids if alive(p)]


# GONE_WAIT bounds a wait for what the supervisor must make happen (a tree
# dead, a cgroup removed, NVML's listing empty, a reply): a bound only a
# failure reaches, as scenario_test.go's e2eSurviveWait. No scenario asserts
# how long it took; the time is noted.
GONE_WAIT = 30
# TREE_WAIT is the wait for a stopped kernel's tree to go: GONE_WAIT, but
# on a stock kernel, which is expected to leave processes (a difference
# noted, not asserted), 2 s, as scenario_test.go's e2eStockWait.
TREE_WAIT = GONE_WAIT if WRAPPED else 2


def wait_dead(pids, timeout):
    deadline = time.monotonic() + timeout
    while True:
        left = survivors(pids)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def wait_gone(probe, timeout=GONE_WAIT, interval=0.02):
    """Call probe (what is left: a list, a set) until it returns nothing or
    timeout passes; returns what it last returned and the seconds it took."""
    t0 = time.monotonic()
    while True:
        left = probe()
        if not left or time.monotonic() - t0 >= timeout:
            return left, time.monotonic() - t0
        time.sleep(interval)


def log_time(line):
    """The wall-clock time (seconds since the epoch) of a supervisor log
    line (slog's time=2026-12-06T13:14:21.123Z), None without one."""
    import datetime
    for f in line.split():
        if f.startswith("time="):
            v = f[len("time="):]
            if v.endswith("Z"):
                v = v[:-1] + "+00:00"  # fromisoformat takes no Z before Python 3.11
            try:
                return datetime.datetime.fromisoformat(v).timestamp()
            except ValueError:
                return None
    return None


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            s = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"
    return " ".join(s.split())


def describe(pids):
    return ["%d %s (%s)" % (p, proc_state(p), cmdline(p)[:90]) for p in pids]


def descendants(root):
    """Every live descendant of root, found by walking /proc ppid links."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                s = f.read()
        except OSError:
            continue
        ppid = int(s[s.rindex(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def spawn_helper(argv, **kw):
    """A helper process of the scenario itself (not through a kernel)."""
    p = subprocess.Popen(argv, **kw)
    _PROCS.append(p)
    return p


# ---------------------------------------------------------------- kernels


def start_kernel(kernel_name=None, interrupt_mode=None, ready_timeout=60, transport_encryption=None):
    """Start a kernel the way Jupyter does (KernelManager + kernelspec) and a
    connected, ready BlockingKernelClient. The supervisor's (and kernel's)
    stdout/stderr go to a log file in E2E_TMP; its tail is printed on failure.
    transport_encryption ("auto", "required") is jupyter_client >= 8.9's."""
    # Named as jupyter_server names them: the supervisor takes the kernel's
    # identity from "kernel-<id>.json", and restarts reuse the file.
    conn = os.path.join(TMP, "kernel-%s.json" % uuid.uuid4())
    kw = {"transport_encryption": transport_encryption} if transport_encryption else {}
    km = KernelManager(kernel_name=kernel_name or KERNEL, connection_file=conn, **kw)
    if interrupt_mode:
        km.kernel_spec.interrupt_mode = interrupt_mode
    n = len(_KMS)
    km.e2e_log = os.path.join(TMP, "kernel-%d-%d.log" % (os.getpid(), n))
    logf = open(km.e2e_log, "ab")
    t0 = time.monotonic()
    km.start_kernel(stdout=logf, stderr=logf)  # restart_kernel reuses these: keep logf open
    km.e2e_logf = logf
    _KMS.append(km)
    track(km.provisioner.pid)
    kc = connect(km, ready_timeout)
    note(**{"start_to_ready_s_%d" % n: round(time.monotonic() - t0, 3)})
    return km, kc


def connect(km, ready_timeout=60):
    kc = km.client()
    kc.start_channels()
    _CLIENTS.append(kc)
    kc.wait_for_ready(timeout=ready_timeout)
    wait_iopub(kc)
    return kc


def autorestart(km, kc, what, track_kernel=True):
    """What the server's autorestart does once the kernel process died:
    KernelRestarter.poll() sees it dead and calls restart_kernel(now=True).
    Returns a client of the fresh kernel (kc is stopped), its supervisor
    tracked, and its kernel too unless track_kernel is False: finding the
    kernel's pid runs a cell, which would be the one told of the last
    kernel's death."""
    from jupyter_client.restarter import KernelRestarter
    restarted = []
    rs = KernelRestarter(kernel_manager=km, restart_limit=3)
    rs.add_callback(lambda: restarted.append(1), "restart")
    rs.poll()
    assert restarted, "KernelRestarter did not restart the kernel " + what
    kc.stop_channels()
    kc = connect(km)
    track(km.provisioner.pid)
    if track_kernel:
        track(kernel_pid(kc))
    return kc


def client_for(connection_file):
    """A second client on the same connection file (jupyter console --existing)."""
    kc = BlockingKernelClient(connection_file=connection_file)
    kc.load_connection_file()
    kc.start_channels()
    _CLIENTS.append(kc)
    kc.wait_for_ready(timeout=30)
    wait_iopub(kc)
    return kc


def wait_iopub(kc, timeout=20):
    """A SUB socket misses what is published before its subscription lands:
    execute no-ops until one's iopub status arrives, so later checks of iopub
    are not racing the subscription."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = execute(kc, "", timeout=5, idle_grace=0.5)
        if r["idle"]:
            return
    raise AssertionError("iopub never delivered a status message within %ss" % timeout)


def kernel_pid(kc):
    r = execute(kc, "import os; print(os.getpid())")
    return int(r["stdout"].strip())


def execute(kc, code, timeout=30, allow_stdin=False, stdin_answer=None, need_idle=True, store_history=True, idle_grace=None):
    """Execute code and collect what it produced until its execute_reply and
    its iopub idle status have both arrived (or timeout). Returns a dict:
    reply (content), status, stdout, stderr, msgs (iopub msgs of this request),
    idle (bool), input_prompts, elapsed."""
    t0 = time.monotonic()
    msg_id = kc.execute(code, allow_stdin=allow_stdin, stop_on_error=False, store_history=store_history)
    return collect(kc, msg_id, timeout, stdin_answer=stdin_answer, need_idle=need_idle, t0=t0, idle_grace=idle_grace)


def collect(kc, msg_id, timeout=30, stdin_answer=None, need_idle=True, t0=None, stop=None, idle_grace=None, need_reply=True):
    """The loop behind execute(); idle_grace bounds the wait for the idle
    status once the reply is in; stop(r) ends it early; need_reply=False for
    a client watching another client's request (it sees iopub only)."""
    t0 = t0 or time.monotonic()
    r = {"msg_id": msg_id, "reply": None, "status": None, "stdout": "", "stderr": "", "msgs": [], "idle": False, "input_prompts": [], "other_iopub": []}
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if (r["reply"] is not None or not need_reply) and (r["idle"] or not need_idle):
            break
        if stop and stop(r):
            break
        if idle_grace is not None and r["reply"] is not None and time.monotonic() - t0 - r["reply_at"] > idle_grace:
            break
        for chan in ("iopub", "shell", "stdin"):
            try:
                msg = getattr(kc, "get_%s_msg" % chan)(timeout=0.005 if chan != "iopub" else 0.02)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                if chan == "iopub" and msg["msg_type"] not in ("status", "execute_input"):
                    c = msg["content"]
                    r["other_iopub"].append("%s parent=%s %r" % (msg["msg_type"], msg["parent_header"].get("msg_id"), str(c.get("text", c))[:200]))
                continue
            t = msg["msg_type"]
            if chan == "shell":
                r["reply"] = msg["content"]
                r["status"] = msg["content"].get("status")
                r["reply_at"] = time.monotonic() - t0
            elif chan == "stdin" and t == "input_request":
                r["input_prompts"].append(msg["content"]["prompt"])
                kc.input(stdin_answer if stdin_answer is not None else "")
            elif chan == "iopub":
                r["msgs"].append(msg)
                if t == "stream":
                    r[msg["content"]["name"]] += msg["content"]["text"]
                elif t == "status" and msg["content"]["execution_state"] == "idle":
                    r["idle"] = True
    r["elapsed"] = time.monotonic() - t0
    return r


def shell_reply(kc, msg_id, timeout=30):
    """The shell reply to msg_id (other replies are dropped)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("no shell reply to %s within %ss" % (msg_id, timeout))
        try:
            m = kc.get_shell_msg(timeout=left)
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") == msg_id:
            return m


def types(r):
    return [m["msg_type"] for m in r["msgs"]]


def ok(r, what=""):
    assert r["reply"] is not None, "%s: no execute_reply within timeout (got iopub %s, stderr %r)" % (what, types(r), r["stderr"][-500:])
    assert r["status"] == "ok", "%s: status %s: %s %s" % (what, r["status"], r["reply"].get("ename", ""), r["reply"].get("evalue", ""))
    return r


def assert_answers(kc, what="kernel"):
    r = ok(execute(kc, "6*7", timeout=30), what + " answers 6*7")
    res = [m for m in r["msgs"] if m["msg_type"] == "execute_result"]
    assert res and res[0]["content"]["data"]["text/plain"] == "42", "%s: 6*7 gave %s" % (what, types(r))


# Kernel-side code that starts the two processes a clean restart must not
# leave behind: a setsid'd double-forked daemon (outside the kernel's process
# group and session, reparented away from the kernel) and a child in the
# kernel's group that ignores SIGTERM, SIGINT and SIGHUP. Prints one line
# "E2E-PIDS {json}".
SPAWN_CHILDREN = r'''
import json as _json, os as _os, subprocess as _sp, sys as _sys
_E2E_DAEMON = """
import os, signal, time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)
print(os.getpid(), flush=True)
n = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2): os.dup2(n, fd)
time.sleep(3600)
"""
_E2E_STUBBORN = """
import os, signal, time
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_IGN)
print(os.getpid(), flush=True)
n = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2): os.dup2(n, fd)
time.sleep(3600)
"""
def _e2e_spawn(src):
    p = _sp.Popen([_sys.executable, "-c", src], stdin=_sp.DEVNULL, stdout=_sp.PIPE, stderr=_sp.DEVNULL)
    pid = int(p.stdout.readline())
    p.stdout.close()
    return p, pid
_e2e_d, _e2e_daemon = _e2e_spawn(_E2E_DAEMON)
_e2e_d.wait()
_e2e_s, _e2e_stubborn = _e2e_spawn(_E2E_STUBBORN)
print("E2E-PIDS " + _json.dumps({"kernel": _os.getpid(), "daemon": _e2e_daemon, "stubborn": _e2e_stubborn}))
'''


def spawn_children(kc):
    """Start the daemon and the stubborn child in the kernel; return
    {"kernel", "daemon", "stubborn"} pids (all tracked)."""
    r = ok(execute(kc, SPAWN_CHILDREN, timeout=30), "spawn children")
    line = [l for l in r["stdout"].splitlines() if l.startswith("E2E-PIDS ")]
    assert line, "spawn children printed %r" % r["stdout"]
    pids = json.loads(line[0][len("E2E-PIDS ") :])
    track(*pids.values())
    assert all(alive(p) for p in pids.values()), "children not running: %s" % describe(pids.values())
    return pids


def state_dir():
    """The supervisor's state directory, as tfgpu-kernel chooses it."""
    if os.environ.get("TFGPU_STATE_DIR"):
        return os.environ["TFGPU_STATE_DIR"]
    if os.geteuid() == 0:
        return "/run/tfgpu-kernel"
    return os.path.join(os.environ.get("XDG_RUNTIME_DIR", ""), "tfgpu-kernel")


def kernel_record(km):
    """The supervisor's record of km's kernel (None if there is none)."""
    conn = os.path.abspath(km.connection_file)
    for name in glob.glob(os.path.join(state_dir(), "*.json")):
        try:
            with open(name) as f:
                st = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(st, dict) and st.get("connection_file") in (conn, km.connection_file):
            return st
    return None


def argv_of(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0")]
    except OSError:
        return []


def is_standby(pid):
    """A standby supervisor: `tfgpu-kernel standby KERNEL_ID`."""
    a = argv_of(pid)
    return len(a) >= 3 and os.path.basename(a[0]) == "tfgpu-kernel" and a[1] == "standby"


def supervisor_pid(km):
    """The supervisor of km's kernel: the process Jupyter started, or, once a
    standby took over the start with its spare kernel, that standby (the
    process Jupyter started is then a stub that forwards signals to it)."""
    st = kernel_record(km)
    if st and st.get("supervisor_pid") and alive(st["supervisor_pid"]):
        return st["supervisor_pid"]
    return km.provisioner.pid


def standbys_of(pid):
    """Waiting standby supervisors below pid, with their spare kernels."""
    out = []
    for p in descendants(pid):
        if is_standby(p):
            out += [p] + descendants(p)
    return out


def tree_below(pid):
    """pid and its live descendants but a waiting standby below it and its
    spare (which by design outlive a restart)."""
    pids = {pid, *descendants(pid)}
    pids -= set(standbys_of(pid)) - {pid}
    return pids


def tree_of(km, kc=None):
    """Pids of the process Jupyter started, the supervisor (see supervisor_pid)
    and all their live descendants but a waiting standby and its spare (which
    by design outlive a restart: they are the next kernel)."""
    root, sup = km.provisioner.pid, supervisor_pid(km)
    pids = {root, sup, *descendants(root), *descendants(sup)}
    pids -= set(standbys_of(root) + standbys_of(sup)) - {sup}
    pids = sorted(pids)
    track(*pids)
    return pids


def oom_cell(km, kc, mib=1500, within=30):
    """Runs a cell that touches mib MiB (bytes * n writes every page, unlike
    bytearray(n), which calloc may map lazily) and waits until the kernel
    (the supervisor) has died of a memory limit; returns the cell's
    collect() result, the supervisor's exit code, and the old tree's
    processes still alive 2 s later."""
    old = tree_of(km)
    msg_id = kc.execute("import time\ntime.sleep(0.2)\nb = b'x' * (%d << 20)\nprint('survived', len(b))" % mib)
    t0 = time.monotonic()
    while km.is_alive() and time.monotonic() - t0 < within:
        time.sleep(0.05)
    assert not km.is_alive(), "the kernel is still alive %d s after touching %d MiB under a memory limit" % (within, mib)
    rc = km.provisioner.process.returncode
    r = collect(kc, msg_id, timeout=2, need_idle=True)
    return r, rc, wait_dead(old, 2.0)


def shutdown_status(km):
    s = km._shutdown_status
    return getattr(s, "value", None) or str(s)


# ---------------------------------------------------------------- running


def _cleanup():
    for kc in _CLIENTS:
        try:
            kc.stop_channels()
        except Exception:
            pass
    for km in _KMS:
        try:
            if km.has_kernel and km.is_alive():
                km.shutdown_kernel(now=True)
        except Exception as e:
            log("cleanup: shutdown_kernel(now=True): %r" % e)
        try:
            if km.has_kernel:
                km.provisioner.process.kill()
                km.provisioner.process.wait(5)
        except Exception:
            pass
    for p in _PROCS:
        try:
            if p.poll() is None:
                p.kill()
            p.wait(5)
        except Exception:
            pass


def _log_tails():
    for km in _KMS:
        path = getattr(km, "e2e_log", None)
        if not path:
            continue
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        tail = data[-3000:].decode(errors="replace")
        log("---- tail of %s (supervisor/kernel stdout+stderr) ----\n%s" % (path, tail))


def http(method, url, token, body=None, timeout=60):
    """One request to a Jupyter server's (or hub's) REST API with a token:
    (HTTP status, the parsed JSON body, the text where it is not JSON, or
    None when empty); never raises on an HTTP error status."""
    import urllib.error
    import urllib.request
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", "token " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text, code = r.read(), r.status
    except urllib.error.HTTPError as e:
        text, code = e.read(), e.code
    try:
        return code, json.loads(text) if text.strip() else None
    except ValueError:
        return code, text[:500]


def run(main):
    """Run a scenario and print the E2E-RESULT line; exit 0 when ok, 1 otherwise.
    A scenario still running E2E_DUMP_AFTER seconds in (the Go side sets it
    shortly before it kills the run) prints every thread's stack on stderr,
    so a hang says where it hangs."""
    res = {"ok": False, "error": ""}
    dump_after = float(os.environ.get("E2E_DUMP_AFTER") or 0)
    if dump_after > 0:
        faulthandler.dump_traceback_later(dump_after, exit=False)
    try:
        main()
        res["ok"] = True
    except BaseException as e:  # report everything, including KeyboardInterrupt
        res["error"] = "%s: %s" % (type(e).__name__, e)
        log(traceback.format_exc())
    try:
        _cleanup()
    except BaseException as e:
        log("cleanup failed: %r" % e)
    if not res["ok"]:
        _log_tails()
    res["pids"] = PIDS
    res["facts"] = FACTS
    sys.stdout.flush()
    print("E2E-RESULT " + json.dumps(res, default=str), flush=True)
    sys.exit(0 if res["ok"] else 1)


def sha256(b):
    return hashlib.sha256(b).hexdigest()
