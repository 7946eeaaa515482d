"""Side-by-side benchmark: the tfgpu-kernel supervisor against the same
ipykernel run directly, and against a plain byte proxy in front of it (the
floor of any relay process on this machine) (docs/benchmarks.md).

Run by cmd/tfgpu-kernel/bench_test.go (BenchmarkKernel, TestBenchSmoke) with
/usr/bin/python3, Debian's jupyter_client 7.4.9 and ipykernel 6.17. The Go
side builds the binary and the proxy and writes their kernelspecs into a
JUPYTER_PATH directory; this script starts one kernel of each, keeps them
up, and runs every workload on each, interleaved (wrapped, direct, floor,
floor, direct, wrapped, ...) so that noise on a shared machine hits all
alike. The relay's budgets are against the floor, in the same run (#25):
the supervisor cannot be faster than copying bytes.

Environment in:
  BENCH_WRAPPED_KERNEL  kernelspec of the supervisor (default "tfgpu")
  BENCH_DIRECT_KERNEL   kernelspec of the plain ipykernel (default "direct")
  BENCH_FLOOR_KERNEL    kernelspec of the byte proxy in front of it (default
                        "floor"; empty: no floor column)
  BENCH_LOG_DIR         where the kernels' stdout/stderr go (default: a temp dir)
  BENCH_ENCRYPTION      "required": both kernels with jupyter_client's
                        transport_encryption (CurveZMQ; the current stack)
  BENCH_RESTART_MODES   e.g. "v2,v1,none": only restart to ready, of kernelspecs
                        <wrapped>-<mode> (the supervisor with --cgroup <mode>)
                        against the direct kernel
  TFGPU_BENCH_QUICK=1   tiny sizes, a smoke test of the harness, not a measurement
  TFGPU_BENCH_JSON      also write the results as JSON to this path

Output: progress on stderr; on stdout the table, one line per figure,
  figure | wrapped | direct | floor | ÷direct | ÷floor | budget | ok?
then the per-kernel sample summaries. Exit status 0 when every workload ran
and every process was reaped (a figure over its budget is reported, not an
error: these are benchmarks, not timed tests), 1 otherwise.
"""

import hashlib
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
import traceback

import zmq
from jupyter_client import KernelManager

QUICK = os.environ.get("TFGPU_BENCH_QUICK", "") not in ("", "0", "false")
WRAPPED_SPEC = os.environ.get("BENCH_WRAPPED_KERNEL", "tfgpu")
DIRECT_SPEC = os.environ.get("BENCH_DIRECT_KERNEL", "direct")
FLOOR_SPEC = os.environ.get("BENCH_FLOOR_KERNEL", "floor")
LOG_DIR = os.environ.get("BENCH_LOG_DIR") or tempfile.mkdtemp(prefix="tfgpu-bench-")
JSON_OUT = os.environ.get("TFGPU_BENCH_JSON", "")
ENCRYPTION = os.environ.get("BENCH_ENCRYPTION", "")  # jupyter_client >= 8.9's transport_encryption

MB = 1 << 20
if QUICK:
    CFG = dict(lat_warm=3, lat_n=15, tp_mb=4, tp_warm=0, tp_reps=2, disp_n=300, disp_warm=0,
               disp_reps=1, restart_reps=1, idle_s=1.0)
else:
    # (tp_warm + tp_reps) x tp_mb > 1 GB relayed by the supervisor before "RSS after".
    CFG = dict(lat_warm=20, lat_n=300, tp_mb=200, tp_warm=1, tp_reps=7, disp_n=20000, disp_warm=1,
               disp_reps=5, restart_reps=5, idle_s=10.0)

TICK = os.sysconf("SC_CLK_TCK")
# Relay CPU budgets (issue #13): half of what the supervisor spent on 2026-12-03
# before the direct sends and raw system calls, 160 ms per 100 MB of stream and
# 782.5 ms per 10 000 display_data (docs/benchmarks.md#relay-cpu).
CPU_STREAM_BUDGET = 80.0
CPU_DISPLAY_BUDGET = 391.0
CELL_TIMEOUT = 300.0
T0 = time.monotonic()


def log(*args):
    print("[bench %6.1fs]" % (time.monotonic() - T0), *args, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ /proc


def proc_stat(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rindex(")") + 2:].split()  # fields from 3 (state) on


def alive(pid):
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def cpu_seconds(pid):
    st = proc_stat(pid)
    return (int(st[11]) + int(st[12])) / TICK  # utime, stime (fields 14, 15)


def wakeups(pid):
    """Context switches of all of pid's threads so far: a process that sleeps
    without timers gains none while idle."""
    n = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, t)) as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        n += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return n


def status_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def descendants(root):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = proc_stat(int(d))
            if st is not None:
                kids.setdefault(int(st[1]), []).append(int(d))
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


# ------------------------------------------------------------------ kernels


class Kernel:
    """One kernel started from a kernelspec. The workloads talk to it through
    plain synchronous pyzmq sockets (one shell DEALER, one iopub SUB) and the
    manager's Session, the same client code for both kernels and cheaper than
    jupyter_client 7's asyncio-backed blocking client, so that client overhead
    dilutes the ratios as little as possible. jupyter_client's own
    KernelClient is used only for wait_for_ready, as Jupyter does."""

    def __init__(self, label, spec):
        self.label, self.spec = label, spec
        self.pids = set()  # every process seen in this kernel's tree, all generations
        self.iopub_bytes = 0  # every iopub frame byte our SUB received
        self.logf = open(os.path.join(LOG_DIR, label + ".log"), "ab")
        kw = {"transport_encryption": ENCRYPTION} if ENCRYPTION else {}
        self.km = KernelManager(kernel_name=spec, **kw)
        self.session = self.km.session
        self.shell = self.iopub = None

    def wait_for_ready(self):
        kc = self.km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
        finally:
            kc.stop_channels()

    def start(self):
        self.km.start_kernel(stdout=self.logf, stderr=self.logf)
        if ENCRYPTION and not self.km.curve_publickey:
            raise RuntimeError("%s: transport_encryption=%s but no CURVE keys" % (self.label, ENCRYPTION))
        self.wait_for_ready()
        self.track()
        self.shell = self.km.connect_shell()
        # Our SUB queues without limit (libzmq's default high-water mark is
        # 1000 messages), so a client briefly starved of CPU on this shared
        # machine does not make the kernel's PUB drop messages: every figure
        # is for all the output, and any loss that remains is reported.
        self.iopub = self.km.context.socket(zmq.SUB)
        if ENCRYPTION:  # as jupyter_client's own sockets do (connect.py)
            self.iopub.curve_secretkey = self.km.curve_secretkey
            self.iopub.curve_publickey = self.km.curve_publickey
            self.iopub.curve_serverkey = self.km.curve_publickey
        self.iopub.setsockopt(zmq.RCVHWM, 0)
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect(self.km._make_url("iopub"))
        # The SUB's subscription reaches the PUB asynchronously: repeat
        # kernel_info until our SUB sees the status of one of them.
        deadline = time.monotonic() + 30
        while True:
            msg_id = self.send("kernel_info_request", {})
            self.shell_reply(msg_id, timeout=10)
            if self.wait_idle(msg_id, timeout=0.5):
                break
            if time.monotonic() > deadline:
                raise TimeoutError("%s: iopub never connected" % self.label)

    def close_sockets(self):
        for s in (self.shell, self.iopub):
            if s is not None:
                s.close(linger=0)
        self.shell = self.iopub = None

    @property
    def pid(self):
        return self.km.provisioner.process.pid

    def ipykernel_pid(self):
        """The ipykernel process itself: the kernel for direct, the supervisor's child when wrapped."""
        for p in [self.pid] + descendants(self.pid):
            try:
                with open("/proc/%d/cmdline" % p, "rb") as f:
                    if b"ipykernel" in f.read():
                        return p
            except OSError:
                pass
        raise RuntimeError("%s: no ipykernel process in the tree of %d" % (self.label, self.pid))

    def track(self):
        """The kernel's tree: the process jupyter_client started, the
        supervisor (a standby that took over the start is named in the
        supervisor's record) and their descendants, but a waiting standby
        and its spare, which by design outlive a restart."""
        root = self.pid
        sup = root
        st = self.record("json")
        if st and alive(st.get("supervisor_pid", 0)):
            sup = st["supervisor_pid"]
        tree = {root, sup, *descendants(root), *descendants(sup)}
        for p in list(tree):
            if p != sup and is_standby(p):
                tree -= {p, *descendants(p)}
        self.pids.update(tree)
        return sorted(tree)

    def record(self, kind):
        """The supervisor's record of this kernel ("json": its state,
        "spare": its spare), or None."""
        kid = kernel_id(self.km.connection_file)
        state = os.environ.get("TFGPU_STATE_DIR") or ("/run/tfgpu-kernel" if os.geteuid() == 0 else
                                                      os.path.join(os.environ.get("XDG_RUNTIME_DIR", ""), "tfgpu-kernel"))
        try:
            with open(os.path.join(state, kid + "." + kind)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    # --- messaging

    def send(self, msg_type, content):
        return self.session.send(self.shell, msg_type, content)["header"]["msg_id"]

    def execute(self, code):
        return self.send("execute_request", dict(code=code, silent=False, store_history=False,
                                                  user_expressions={}, allow_stdin=False,
                                                  stop_on_error=True))

    def shell_reply(self, msg_id, timeout=CELL_TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            if not self.shell.poll(int(max(0.0, deadline - time.monotonic()) * 1000) + 1):
                if time.monotonic() > deadline:
                    raise TimeoutError("%s: no shell reply in %.0f s" % (self.label, timeout))
                continue
            _, msg = self.session.feed_identities(self.shell.recv_multipart())
            m = self.session.deserialize(msg)  # checks the signature
            if m["parent_header"].get("msg_id") == msg_id:
                return m

    def iopub_frames(self, timeout):
        """Next iopub message as (frames, index of the delimiter), or None on timeout."""
        if not self.iopub.poll(int(timeout * 1000)):
            return None
        frames = self.iopub.recv_multipart()
        self.iopub_bytes += sum(len(f) for f in frames)
        return frames, frames.index(b"<IDS|MSG>")

    def wait_idle(self, msg_id, timeout):
        pid_b = msg_id.encode()
        deadline = time.monotonic() + timeout
        while True:
            r = self.iopub_frames(max(0.0, deadline - time.monotonic()))
            if r is None:
                return False
            f, i = r
            # frames: delim, hmac, header, parent, metadata, content, buffers...
            if pid_b in f[i + 3] and b'"status"' in f[i + 2] and b'"idle"' in f[i + 5]:
                return True

    def drain_iopub(self):
        while self.iopub_frames(0) is not None:
            pass

    # --- workloads

    def run_cell(self, code):
        """Execute code; consume iopub until the kernel is idle for this request.
        Returns (seconds from send to idle and reply, stdout chars, display_data count)."""
        self.drain_iopub()
        t0 = time.perf_counter()
        msg_id = self.execute(code)
        pid_b = msg_id.encode()
        out_chars = displays = 0
        deadline = time.monotonic() + CELL_TIMEOUT
        while True:
            r = self.iopub_frames(1.0)
            if r is None:
                if time.monotonic() > deadline:
                    raise TimeoutError("%s: no idle on iopub after %.0f s" % (self.label, CELL_TIMEOUT))
                continue
            f, i = r
            if pid_b not in f[i + 3]:
                continue
            mt = json.loads(f[i + 2])["msg_type"]
            if mt == "stream":
                if b'"stdout"' in f[i + 5]:
                    out_chars += f[i + 5].count(b"q")  # the payload is all 'q'; no key has one
            elif mt == "display_data":
                displays += 1
            elif mt == "error":
                raise RuntimeError("%s: cell failed: %s" % (self.label, f[i + 5][:500]))
            elif mt == "status" and b'"idle"' in f[i + 5]:
                break
        reply = self.shell_reply(msg_id)
        dt = time.perf_counter() - t0
        if reply["content"]["status"] != "ok":
            raise RuntimeError("%s: execute_reply %s" % (self.label, reply["content"]))
        return dt, out_chars, displays

    def pass_rtt(self):
        """execute_request('pass') -> execute_reply, in seconds; then waits
        (untimed) for the request's idle on iopub so every sample starts quiet."""
        t0 = time.perf_counter()
        msg_id = self.execute("pass")
        reply = self.shell_reply(msg_id, timeout=30)
        dt = time.perf_counter() - t0
        if reply["content"]["status"] != "ok":
            raise RuntimeError("%s: pass failed: %s" % (self.label, reply["content"]))
        if not self.wait_idle(msg_id, timeout=30):
            raise TimeoutError("%s: no idle after pass" % self.label)
        return dt

    def restart(self):
        """restart_kernel + wait_for_ready, as Jupyter does it, in seconds."""
        self.close_sockets()
        old = self.track()
        kc = self.km.client()
        kc.start_channels()
        try:
            t0 = time.perf_counter()
            self.km.restart_kernel(now=False)
            kc.wait_for_ready(timeout=60)
            dt = time.perf_counter() - t0
        finally:
            kc.stop_channels()
        left = [p for p in old if alive(p)]
        if left:
            raise RuntimeError("%s: old tree still alive after restart: %s" % (self.label, left))
        self.track()
        return dt

    def restart_then(self, code):
        """restart_kernel + wait_for_ready, and that plus the first cell
        `code` to its execute_reply, in seconds. A kernel with a spare
        restarts once its spare is ready (untimed): the figure is the spare's."""
        self.close_sockets()
        old = self.track()
        if self.label in ("spare", "preload"):
            self.wait_spare()
        kc = self.km.client()
        kc.start_channels()
        try:
            t0 = time.perf_counter()
            self.km.restart_kernel(now=False)
            kc.wait_for_ready(timeout=60)
            t1 = t2 = time.perf_counter()
            if code:
                msg_id = kc.execute(code)
                while True:
                    m = kc.get_shell_msg(timeout=60)
                    if m["parent_header"].get("msg_id") == msg_id:
                        break
                t2 = time.perf_counter()
                if m["content"]["status"] != "ok":
                    raise RuntimeError("%s: %r: %s" % (self.label, code, m["content"]))
        finally:
            kc.stop_channels()
        left = [p for p in old if alive(p)]
        if left:
            raise RuntimeError("%s: old tree still alive after restart: %s" % (self.label, left))
        self.track()
        return t1 - t0, t2 - t0

    def spare_record(self):
        """The supervisor's record of this kernel's spare, or None."""
        sp = self.record("spare")
        return sp if sp and alive(sp.get("pid", 0)) else None

    def wait_spare(self, timeout=60):
        deadline = time.monotonic() + timeout
        while self.spare_record() is None:
            if time.monotonic() > deadline:
                raise TimeoutError("%s: no spare kernel within %ss" % (self.label, timeout))
            time.sleep(0.05)

    def shutdown(self):
        """Clean path first; returns the pids of this kernel's trees still alive after."""
        self.close_sockets()
        try:
            if self.km.has_kernel:
                self.track()
                t0 = time.perf_counter()
                self.km.shutdown_kernel(now=False)
                log("%s: shutdown_kernel(now=False) took %.0f ms" % (self.label, (time.perf_counter() - t0) * 1000))
        except Exception as e:  # noqa: BLE001 — report, then make sure by pid
            log("%s: shutdown_kernel: %r" % (self.label, e))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(p) for p in self.pids):
            time.sleep(0.05)
        left = sorted(p for p in self.pids if alive(p))
        for p in left:  # only processes of trees this script started
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.logf.close()
        return left


# ------------------------------------------------------------------ workloads


def is_standby(pid):
    """A standby supervisor: `tfgpu-kernel standby KERNEL_ID`."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return len(argv) >= 3 and os.path.basename(argv[0]) == b"tfgpu-kernel" and argv[1] == b"standby"


def kernel_id(conn):
    """The kernel's id as the supervisor names it (jmsg.KernelID)."""
    m = re.match(r"^kernel-(.+)\.json$", os.path.basename(conn))
    if m:
        return m.group(1)
    return hashlib.sha256(os.path.abspath(conn).encode()).hexdigest()[:12]


def med(xs):
    return statistics.median(xs)


def interleaved(kernels, reps, fn):
    """fn(kernel) reps times on each kernel, order A B B A A B ... ."""
    res = {k.label: [] for k in kernels}
    for r in range(reps):
        order = kernels if r % 2 == 0 else kernels[::-1]
        for k in order:
            res[k.label].append(fn(k))
    return res


def with_kernels(specs, measure):
    """Starts a Kernel per (label, kernelspec), runs measure(kernels), and
    always shuts them down; returns the errors, each also printed."""
    kernels, failed = [], []
    try:
        for label, spec in specs:
            kernels.append(Kernel(label, spec))
            kernels[-1].start()
            log("%s (%s) up: pid %d" % (label, spec, kernels[-1].pid))
        measure(kernels)
    except BaseException as e:  # noqa: BLE001 — always report and always reap
        failed.append("%s: %s" % (type(e).__name__, e))
        traceback.print_exc()
    finally:
        for k in kernels:
            left = k.shutdown()
            if left:
                failed.append("%s: processes alive after shutdown_kernel (SIGKILLed): %s" % (k.label, left))
    return failed


def restart_modes(modes):
    """Restart to ready of the supervisor in each containment mode against
    the direct kernel, interleaved: what each mode adds to a restart."""
    reps = 2 if QUICK else 20
    rows = []

    def measure(kernels):
        log("restart to ready: %d each, modes %s" % (reps, modes))
        rst = interleaved(kernels, reps, Kernel.restart)
        d = med(rst["direct"]) * 1000
        for m in modes:
            w = med(rst[m]) * 1000
            rows.append((m, w, d, w / d, w - d))

    failed = with_kernels([("direct", DIRECT_SPEC)] + [(m, "%s-%s" % (WRAPPED_SPEC, m)) for m in modes], measure)
    print("\nrestart_kernel + wait_for_ready per containment mode, median of %d, %d CPUs" % (reps, os.cpu_count()))
    print("mode | wrapped | direct | ratio | added")
    for m, w, d, r, a in rows:
        print("%s | %.1f ms | %.1f ms | %.3f | %+.1f ms" % (m, w, d, r, a))
    for e in failed:
        print("ERROR: " + e)
    if JSON_OUT:
        with open(JSON_OUT, "w") as f:
            json.dump({"quick": QUICK, "restart_modes": [dict(zip(("mode", "wrapped_ms", "direct_ms", "ratio", "added_ms"), r))
                                                         for r in rows], "errors": failed}, f, indent=1)
    return 1 if failed else 0


def restart_spare(preload):
    """docs/benchmarks.md#restart: restart_kernel + wait_for_ready, and that
    plus the first cell's `import PRELOAD`, for the supervisor cold
    (--no-spare), with its spare, and with the spare preloading PRELOAD,
    beside the direct kernel and the null kernel (nullkernel.py: the floor of
    any kernel's restart under jupyter_client here), interleaved; and the
    spare's resident memory."""
    reps = 2 if QUICK else 15
    specs = [("null", "null"), ("direct", DIRECT_SPEC), ("cold", WRAPPED_SPEC + "-cold"),
             ("spare", WRAPPED_SPEC), ("preload", WRAPPED_SPEC + "-preload")]
    rows, rss = {}, {}
    code = "import " + preload

    def measure(kernels):
        log("restart to ready, then `%s`: %d each" % (code, reps))
        res = interleaved(kernels, reps, lambda k: k.restart_then(None if k.label == "null" else code))
        for label, xs in res.items():
            rows[label] = (med([x[0] for x in xs]) * 1000, med([x[1] for x in xs]) * 1000)
        for k in kernels:
            if k.label in ("spare", "preload"):
                k.wait_spare()
                sp = k.spare_record()
                rss[k.label] = (status_kb(sp["pid"], "VmRSS") / 1024, status_kb(sp["standby_pid"], "VmRSS") / 1024)

    failed = with_kernels(specs, measure)
    py = os.environ.get("BENCH_PYTHON", sys.executable)
    print("\nrestart_kernel + wait_for_ready, and + first cell `%s`, median of %d, %d CPUs, %s" % (code, reps, os.cpu_count(), py))
    print("kernel | ready | ÷direct | ÷null | ready + `%s` | ÷direct" % code)
    d, n = rows.get("direct"), rows.get("null")
    for label, _ in specs:
        if label not in rows:
            continue
        r, ri = rows[label]
        if label == "null":
            print("null | %.1f ms | %.3f | 1.000 | - | -" % (r, r / d[0] if d else 0))
            continue
        print("%s | %.1f ms | %.3f | %.3f | %.1f ms | %.3f" % (label, r, r / d[0], r / n[0] if n else 0, ri, ri / d[1]))
    for label, (spare_mb, standby_mb) in rss.items():
        print("%s: idle spare VmRSS %.1f MB, its standby supervisor %.1f MB" % (label, spare_mb, standby_mb))
    for e in failed:
        print("ERROR: " + e)
    if JSON_OUT:
        with open(JSON_OUT, "w") as f:
            json.dump({"quick": QUICK, "preload": preload, "python": py,
                       "restart_ms": {k: v[0] for k, v in rows.items()}, "restart_import_ms": {k: v[1] for k, v in rows.items()},
                       "rss_mb": rss, "errors": failed}, f, indent=1)
    return 1 if failed else 0


SPAWN_19 = "import subprocess\n_kids = [subprocess.Popen(['sleep', '1000']) for _ in range(19)]\n"


def shutdown_budget():
    """docs/benchmarks.md#shutdown: shutdown_request → tree dead and NVML checked, 20-process
    tree (the kernel and 19 children). The supervisor runs with whatever
    NVML the environment gives it (the Go side passes the fake); the time is
    from sending shutdown_request to the supervisor's exit, which comes after
    its NVML check."""
    reps = 2 if QUICK else 10
    times, failed, lines = [], [], []
    for i in range(reps):
        k = Kernel("wrapped", WRAPPED_SPEC)
        try:
            k.start()
            k.run_cell(SPAWN_19)
            tree = set(k.track())  # the supervisor, ipykernel and its 19 children
            assert len(tree) >= 21, "tree %s: want the supervisor and 20 processes" % sorted(tree)
            sup = k.km.provisioner.process
            ctl = k.km.connect_control()
            time.sleep(0.2)  # connected before the clock starts
            t0 = time.perf_counter()
            k.session.send(ctl, "shutdown_request", dict(restart=False))
            while sup.poll() is None and time.perf_counter() - t0 < 30:
                time.sleep(0.001)
            times.append((time.perf_counter() - t0) * 1000)
            ctl.close(linger=0)
            left = [p for p in tree if alive(p)]
            if left:
                failed.append("rep %d: alive after the supervisor exited: %s" % (i, left))
            k.logf.flush()
            with open(k.logf.name, errors="replace") as f:
                lines = [l for l in f.read().splitlines() if "GPU memory released" in l or "kernel stopped" in l][-2:]
        except BaseException as e:  # noqa: BLE001 — always report and always reap
            failed.append("%s: %s" % (type(e).__name__, e))
            traceback.print_exc()
        finally:
            left = k.shutdown()
            if left:
                failed.append("processes alive after shutdown_kernel (SIGKILLed): %s" % left)
    print("\nshutdown_request -> tree of 20 dead and NVML checked (supervisor exited), %d runs, %d CPUs" % (reps, os.cpu_count()))
    if times:
        print("median %.1f ms, min %.1f, max %.1f; budget <= 100 ms" % (med(times), min(times), max(times)))
    for l in lines:
        print("  last run's log: " + l)
    for e in failed:
        print("ERROR: " + e)
    if JSON_OUT:
        with open(JSON_OUT, "w") as f:
            json.dump({"quick": QUICK, "shutdown_ms": times, "errors": failed}, f, indent=1)
    return 1 if failed else 0


def main():
    if os.environ.get("BENCH_SHUTDOWN"):
        return shutdown_budget()
    if os.environ.get("BENCH_SPARE_PRELOAD"):
        return restart_spare(os.environ["BENCH_SPARE_PRELOAD"])
    modes = [m for m in os.environ.get("BENCH_RESTART_MODES", "").split(",") if m]
    if modes:
        return restart_modes(modes)
    results = {"quick": QUICK, "config": CFG, "figures": [], "samples": {}, "errors": []}
    kernels = []

    def fail(msg):
        results["errors"].append(msg)
        log("ERROR:", msg)

    def emit_figure(key, name, w, d, ratio, budget, ok, unit, floor=None, floor_ratio=None, **extra):
        fig = dict(key=key, figure=name, wrapped=w, direct=d, ratio=ratio, floor=floor, floor_ratio=floor_ratio,
                   budget=budget, ok=ok, unit=unit, **extra)
        results["figures"].append(fig)

    def on_term(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, on_term)
    log("logs of the kernels in", LOG_DIR, "quick" if QUICK else "full", CFG)
    try:
        W, D = Kernel("wrapped", WRAPPED_SPEC), Kernel("direct", DIRECT_SPEC)
        kernels = [W, D] + ([Kernel("floor", FLOOR_SPEC)] if FLOOR_SPEC else [])
        for k in kernels:
            k.start()
            log("%s (%s) up: pid %d tree %s" % (k.label, k.spec, k.pid, k.track()))
        sup = W.pid

        # 6 + 5a: supervisor idle CPU and idle RSS, before any traffic but the start.
        time.sleep(1.0)
        c0, w0 = cpu_seconds(sup), wakeups(sup)
        kpid = {k.label: k.ipykernel_pid() for k in kernels}
        kc0 = {k.label: cpu_seconds(kpid[k.label]) for k in kernels}  # ipykernel, for scale
        time.sleep(CFG["idle_s"])
        cpu, wake = cpu_seconds(sup) - c0, wakeups(sup) - w0
        kcpu = {k.label: cpu_seconds(kpid[k.label]) - kc0[k.label] for k in kernels}
        rss_idle = status_kb(sup, "VmRSS")
        log("supervisor idle: %.3f s CPU and %d wake-ups in %.1f s, VmRSS %d kB" % (cpu, wake, CFG["idle_s"], rss_idle))

        # 1: pass round trip
        log("pass round trip: %d warm-up + %d each" % (CFG["lat_warm"], CFG["lat_n"]))
        interleaved(kernels, CFG["lat_warm"], Kernel.pass_rtt)
        lat = interleaved(kernels, CFG["lat_n"], Kernel.pass_rtt)
        lat = {k: [x * 1000 for x in v] for k, v in lat.items()}

        # 2: stream throughput
        n_mb = CFG["tp_mb"]
        tp_code = ("import sys\n_s = 'q' * %d\nfor _ in range(%d):\n"
                   "    sys.stdout.write(_s)\n    sys.stdout.flush()\ndel _s\n" % (MB, n_mb))
        lost = {}
        relay_cpu = {"stream": [], "display": []}  # the supervisor's CPU s per wrapped run

        def sup_cpu(key, k, run):
            """run(), and for the wrapped kernel note the supervisor's CPU seconds."""
            c = cpu_seconds(sup) if k is W else None
            out = run()
            if c is not None:
                relay_cpu[key].append(cpu_seconds(sup) - c)
            return out

        def tp_run(k):
            dt, chars, _ = sup_cpu("stream", k, lambda: k.run_cell(tp_code))
            if chars != n_mb * MB:
                lost.setdefault(k.label, []).append(n_mb * MB - chars)
            log("  %s: %d MB stream in %.3f s (%.1f MB/s)%s" % (
                k.label, n_mb, dt, chars / MB / dt, "" if chars == n_mb * MB else " LOST %d B" % (n_mb * MB - chars)))
            return dt

        log("stream throughput: %d MB x (%d warm-up + %d) each" % (n_mb, CFG["tp_warm"], CFG["tp_reps"]))
        interleaved(kernels, CFG["tp_warm"], tp_run)
        tp = interleaved(kernels, CFG["tp_reps"], tp_run)
        tp_mbs = {k: [n_mb / t for t in v] for k, v in tp.items()}
        for label, l in lost.items():
            fail("%s: stream output lost %d bytes in %d of %d runs" % (
                label, sum(l), len(l), CFG["tp_warm"] + CFG["tp_reps"]))

        # 3: many small display_data
        n_disp = CFG["disp_n"]
        disp_code = ("from IPython.display import display\nfor i in range(%d):\n"
                     "    display({'text/plain': str(i)}, raw=True)\n" % n_disp)
        disp_lost = {}

        def disp_run(k):
            dt, _, n = sup_cpu("display", k, lambda: k.run_cell(disp_code))
            if n != n_disp:
                disp_lost.setdefault(k.label, []).append(n_disp - n)
            log("  %s: %d display_data in %.3f s%s" % (k.label, n, dt, "" if n == n_disp else " LOST %d" % (n_disp - n)))
            return dt

        log("display_data: %d x (%d warm-up + %d) each" % (n_disp, CFG["disp_warm"], CFG["disp_reps"]))
        interleaved(kernels, CFG["disp_warm"], disp_run)
        disp = interleaved(kernels, CFG["disp_reps"], disp_run)
        for label, l in disp_lost.items():
            fail("%s: display_data lost %d messages in %d of %d runs" % (
                label, sum(l), len(l), CFG["disp_warm"] + CFG["disp_reps"]))

        # 5b: supervisor RSS after all that traffic
        W.drain_iopub()
        relayed_mb = W.iopub_bytes / MB
        rss_after = status_kb(sup, "VmRSS")
        hwm = status_kb(sup, "VmHWM")
        log("supervisor after %.0f MB of iopub: VmRSS %d kB, VmHWM %d kB" % (relayed_mb, rss_after, hwm))

        # 4: restart to ready (last: it replaces the supervisor measured above)
        log("restart to ready: %d each" % CFG["restart_reps"])
        rst = interleaved(kernels, CFG["restart_reps"], Kernel.restart)
        rst = {k: [x * 1000 for x in v] for k, v in rst.items()}

        # The warm-up runs are measured too: CPU per unit of work does not warm up.
        cpu_stream = [c * 100 / n_mb * 1000 for c in relay_cpu["stream"]]
        cpu_disp = [c * 10000 / n_disp * 1000 for c in relay_cpu["display"]]
        results["samples"] = {
            "relay_cpu_stream_ms_per_100MB": cpu_stream, "relay_cpu_display_ms_per_10k": cpu_disp,
            "pass_ms": lat, "stream_s": tp, "stream_MBps": tp_mbs, "display_s": disp, "restart_ms": rst,
        }

        def ratio_fig(key, name, samples, unit, budget, le, against):
            """The medians and both ratios; the budget is on the ratio
            to `against` ("floor" for the relay's figures, "direct" for
            the restart, which is not the relay's)."""
            w, d = med(samples["wrapped"]), med(samples["direct"])
            f = med(samples["floor"]) if "floor" in samples else None
            r, fr = w / d, (w / f if f else None)
            if against == "floor" and fr is None:
                against = "direct"  # no floor in this run (BENCH_FLOOR_KERNEL empty)
            judged = fr if against == "floor" else r
            ok = judged <= budget if le else judged >= budget
            emit_figure(key, name, w, d, r, ("<= %.2f" if le else ">= %.2f") % budget + " ÷" + against, ok, unit,
                        floor=f, floor_ratio=fr)

        ratio_fig("pass", "execute_request('pass') round trip, median", lat, "ms", 1.03, True, "floor")
        ratio_fig("stream", "iopub throughput, %d MB stream, median" % n_mb, tp_mbs, "MB/s", 0.97, False, "floor")
        ratio_fig("display", "%d display_data until idle, median" % n_disp, disp, "s", 1.03, True, "floor")
        ratio_fig("restart", "restart_kernel + wait_for_ready, median", rst, "ms", 1.10, True, "direct")
        emit_figure("rss_idle", "supervisor VmRSS idle after start", rss_idle / 1024, None, None,
                    "<= 20 MB", rss_idle <= 20 * 1024, "MB")
        emit_figure("rss_after", "supervisor VmRSS after %.0f MB iopub relayed" % relayed_mb,
                    rss_after / 1024, None, None, "<= 40 MB", rss_after <= 40 * 1024, "MB",
                    relayed_MB=relayed_mb)
        emit_figure("rss_peak", "supervisor VmHWM (peak RSS) through all of that", hwm / 1024, None, None,
                    "<= 40 MB", hwm <= 40 * 1024, "MB")
        emit_figure("cpu_stream", "supervisor CPU per 100 MB of stream, median", med(cpu_stream), None, None,
                    "<= %.0f ms (half of 2026-12-03's)" % CPU_STREAM_BUDGET, med(cpu_stream) <= CPU_STREAM_BUDGET, "ms")
        emit_figure("cpu_display", "supervisor CPU per 10 000 display_data, median", med(cpu_disp), None, None,
                    "<= %.0f ms (half of 2026-12-03's)" % CPU_DISPLAY_BUDGET, med(cpu_disp) <= CPU_DISPLAY_BUDGET, "ms")
        emit_figure("cpu_idle", "supervisor CPU while idle %.0f s" % CFG["idle_s"], cpu * 1000, None, None,
                    "~0 (<= 10 ms)", cpu <= 0.010, "ms",
                    ipykernel_idle_cpu_ms={k: v * 1000 for k, v in kcpu.items()})
        emit_figure("wakeups_idle", "supervisor wake-ups (context switches) while idle %.0f s" % CFG["idle_s"],
                    wake, None, None, "0", wake == 0, "")
    except BaseException as e:  # noqa: BLE001 — always report and always reap
        fail("%s: %s" % (type(e).__name__, e))
        traceback.print_exc()
    finally:
        for k in kernels:
            left = k.shutdown()
            if left:
                fail("%s: processes alive after shutdown_kernel (SIGKILLed): %s" % (k.label, left))
        results["reaped_pids"] = {k.label: sorted(k.pids) for k in kernels}
        log("all kernels shut down; pids checked:", results["reaped_pids"])

    print_table(results)
    if JSON_OUT:
        with open(JSON_OUT, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if results["errors"] else 0


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "ms":
        return "%.3f ms" % v
    if unit == "s":
        return "%.3f s" % v
    if unit == "MB/s":
        return "%.1f MB/s" % v
    if unit == "MB":
        return "%.1f MB" % v
    return "%g %s" % (v, unit)


def print_table(results):
    rows = [("figure", "wrapped", "direct", "floor", "÷direct", "÷floor", "budget", "ok?")]
    for f in results["figures"]:
        rows.append((f["figure"], fmt(f["wrapped"], f["unit"]), fmt(f["direct"], f["unit"]), fmt(f.get("floor"), f["unit"]),
                     "-" if f["ratio"] is None else "%.3f" % f["ratio"],
                     "-" if f.get("floor_ratio") is None else "%.3f" % f["floor_ratio"], f["budget"],
                     "yes" if f["ok"] else "NO"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    mode = "QUICK smoke run (tiny sizes, not a measurement)" if results["quick"] else "full run"
    print("\ntfgpu-kernel benchmark, wrapped vs direct ipykernel and vs a plain byte proxy (floor), "
          "interleaved in one run, %s, %d CPUs" % (mode, os.cpu_count()))
    for i, r in enumerate(rows):
        print(" | ".join(c.ljust(widths[j]) if j == 0 else c.rjust(widths[j]) for j, c in enumerate(r)).rstrip())
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    s = results["samples"]
    if s:
        print("\nsamples (n, min / median / max):")
        for key, unit in (("pass_ms", "ms"), ("stream_MBps", "MB/s"), ("display_s", "s"), ("restart_ms", "ms")):
            for label in ("wrapped", "direct", "floor"):
                if label not in s[key]:
                    continue
                xs = s[key][label]
                print("  %-12s %-8s n=%-4d %s / %s / %s" % (key, label, len(xs), fmt(min(xs), unit),
                                                            fmt(med(xs), unit), fmt(max(xs), unit)))
    for f in results["figures"]:
        if f["key"] == "cpu_idle":
            print("  ipykernel's own idle CPU, for scale: %s" % ", ".join(
                "%s %.0f ms" % kv for kv in f["ipykernel_idle_cpu_ms"].items()))
    for e in results["errors"]:
        print("ERROR: " + e)
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
