"""Helpers for server.py and browser.py: the Jupyter server a scenario starts and
drives with curl, and the two ways a user checks the GPU from outside (NVML
through ctypes, `tfgpu-kernel ps --json`).

Everything started here is registered with harness (spawn_helper, track),
so harness.run's cleanup kills what a failed scenario leaves and the Go side's
survivor check covers it. The token is a fresh random one per server.
"""

import json
import os
import queue
import secrets
import signal
import socket
import subprocess
import time

from jupyter_client.blocking import BlockingKernelClient

import harness as h
from nvmlcheck import listed_pids, ps_json  # noqa: F401 (server.py uses them through this module)

# ------------------------------------------------------------ the server


def free_port():
    """A port nobody listens on now. The server is started with
    --port-retries=0, so a race for it shows as a start failure, retried."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HTTPError(AssertionError):
    pass


# The "current" stack's server is jupyter_server 2 (E2E_STACK).
CURRENT = os.environ.get("E2E_STACK") == "current"


class NotebookServer:
    """The stack's Jupyter server on 127.0.0.1: Debian's jupyter-notebook
    6.4.12 (`python3 -m notebook`), or jupyter_server 2 on "current",
    with its own runtime, config and notebook directories under dir. It
    inherits os.environ: JUPYTER_PATH (the installed tfgpu kernelspec), the
    fake NVML's LD_LIBRARY_PATH, FAKE_NVML_* and PYTHONPATH, TFGPU_STATE_DIR,
    and E2E_TAG, so every supervisor it starts carries them."""

    def __init__(self, dir, app=None, transport_encryption=None):
        self.app = app  # "jupyterlab" or "notebook" (7) on the current stack; None: the plain server
        self.transport_encryption = transport_encryption  # jupyter_client >= 8.9's KernelManager trait (current)
        self.dir = dir
        self.runtime = os.path.join(dir, "runtime")  # connection files: kernel-<id>.json
        self.notebooks = os.path.join(dir, "notebooks")
        self.config = os.path.join(dir, "config")
        for d in (self.runtime, self.notebooks, self.config):
            os.makedirs(d, exist_ok=True)
        self.log_path = os.path.join(dir, "server.log")
        self.token = secrets.token_hex(24)
        self.proc = None
        self.url = None

    def start(self, timeout=60, attempts=3):
        """Start the server and poll GET /api/status until it answers 200,
        within timeout per attempt; another port when the chosen one was
        taken in between."""
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=self.runtime, JUPYTER_CONFIG_DIR=self.config)
        for attempt in range(attempts):
            port = free_port()
            self.url = "http://127.0.0.1:%d" % port
            argv = [h.PY, "-m", "notebook", "--no-browser", "--allow-root",  # the tests run as root
                    "--ip=127.0.0.1", "--port=%d" % port, "--port-retries=0"]
            if CURRENT:  # jupyter_server 2, which JupyterLab 4 and Notebook 7 run on
                argv[1:3] = ["-m", self.app or "jupyter_server"]
                argv += ["--IdentityProvider.token=" + self.token, "--ServerApp.root_dir=" + self.notebooks]
                if self.transport_encryption:
                    argv.append("--KernelManager.transport_encryption=" + self.transport_encryption)
            else:  # Debian's classic notebook server 6.4.12
                argv += ["--NotebookApp.token=" + self.token, "--NotebookApp.notebook_dir=" + self.notebooks,
                         "--NotebookApp.open_browser=False"]
            with open(self.log_path, "ab") as logf:
                self.proc = h.spawn_helper(argv, env=env, stdin=subprocess.DEVNULL, stdout=logf,
                                           stderr=subprocess.STDOUT, cwd=self.notebooks)
            h.track(self.proc.pid)
            t0 = time.monotonic()
            while time.monotonic() - t0 < timeout:
                if self.proc.poll() is not None:
                    break
                code, _ = self.curl("GET", "/api/status", timeout=2, check=False)
                if code == 200:
                    h.note(server_start_s=round(time.monotonic() - t0, 3))
                    return
                time.sleep(0.1)
            taken = "is already in use" in self.log()
            self.kill()
            if not taken:
                raise AssertionError("the notebook server did not answer /api/status within %ss (exit %s):\n%s" % (
                    timeout, self.proc.returncode, self.log()[-3000:]))
            h.log("port %d was taken before the server bound it; again (%d)" % (port, attempt + 1))
        raise AssertionError("no free port for the notebook server after %d attempts" % attempts)

    def curl(self, method, path, body=None, timeout=60, check=True):
        """One request with curl, as a user would send it: returns (HTTP
        status, parsed JSON body or None). check: fail unless 2xx."""
        argv = ["curl", "--silent", "--show-error", "--max-time", str(timeout), "-X", method,
                "-H", "Authorization: token " + self.token, "-w", "\n%{http_code}"]
        if body is not None:
            argv += ["-H", "Content-Type: application/json", "--data", json.dumps(body)]
        argv.append(self.url + path)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 10)
        text, _, code = p.stdout.rpartition("\n")
        code = int(code) if code.isdigit() else 0  # 000: no connection
        if check and not 200 <= code < 300:
            raise HTTPError("curl -X %s %s: HTTP %s (curl exit %d) %s %s" % (
                method, path, code, p.returncode, text[:500], p.stderr.strip()[:500]))
        try:
            return code, json.loads(text) if text.strip() else None
        except ValueError:
            return code, text

    def connection_file(self, kernel_id):
        return os.path.join(self.runtime, "kernel-%s.json" % kernel_id)

    def stop(self, timeout=30):
        """POST /api/shutdown (the server shuts its kernels down and exits),
        then wait for it; SIGTERM and SIGKILL only as a last resort. Returns
        how it ended: "api", "sigterm" or "sigkill"."""
        if self.proc is None or self.proc.poll() is not None:
            return "gone"
        try:
            self.curl("POST", "/api/shutdown", timeout=10)
            self.proc.wait(timeout)
            return "api"
        except (AssertionError, subprocess.TimeoutExpired) as e:
            h.log("the server did not stop through /api/shutdown: %s" % e)
        return self.kill()

    def kill(self):
        for sig, how in ((signal.SIGTERM, "sigterm"), (signal.SIGKILL, "sigkill")):
            if self.proc.poll() is not None:
                return how
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
                return how
            except subprocess.TimeoutExpired:
                pass
        return "sigkill"

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def ps_row(bin, kernel_id):
    """The ps row of kernel_id, or None; more than one is an error."""
    rows = [r for r in ps_json(bin) if r.get("kernel_id") == kernel_id]
    assert len(rows) <= 1, "ps --json has %d rows for %s: %s" % (len(rows), kernel_id, rows)
    return rows[0] if rows else None


def wait_kernel_info(conn, timeout=60):
    """Wait until the kernel of connection file conn answers kernel_info,
    the readiness a notebook front end waits for; returns the seconds waited.

    harness.client_for cannot be the first to wait for a kernel that is
    still starting: a client not made by a KernelManager takes a missed
    heartbeat for a dead kernel (jupyter_client 7.4.9 wait_for_ready), and
    the heartbeat is only answered once ipykernel is up, a second or more
    after the server said "started". So this client runs without the
    heartbeat and is closed once the kernel has answered."""
    kc = BlockingKernelClient(connection_file=conn)
    kc.load_connection_file()
    kc.start_channels(hb=False)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout:
            msg_id = kc.kernel_info()
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline:
                try:
                    m = kc.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.01))
                except queue.Empty:
                    break
                if m["parent_header"].get("msg_id") == msg_id:
                    return time.monotonic() - t0
        raise AssertionError("the kernel of %s did not answer kernel_info within %ss" % (conn, timeout))
    finally:
        kc.stop_channels()


def ppid(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    return int(s[s.rindex(")") + 2:].split()[1])


def poll(cond, timeout, interval=0.05):
    """Poll cond() until it returns something true or timeout passes;
    returns (last value, seconds waited)."""
    t0 = time.monotonic()
    while True:
        v = cond()
        if v or time.monotonic() - t0 >= timeout:
            return v, time.monotonic() - t0
        time.sleep(interval)


# ------------------------------------------------------------ the kernel's tree

MIB = 1 << 20
WANT_GPU = {0: 1024 * MIB, 1: 512 * MIB}  # what HOLD holds, by device

# A cell that holds GPU0 in the kernel and starts a holder of GPU1 in a
# session of its own (outside the process group Jupyter signals).
HOLD = r'''
import holder, json, os
holder.hold(0, 1024)
print("E2E-PIDS " + json.dumps({"kernel": os.getpid(), "escapee": holder.escape(1, 512, "setsid")}))
'''


def hold_pids(output, what):
    """The pids HOLD printed in output, tracked."""
    line = [l for l in output.splitlines() if l.startswith("E2E-PIDS ")]
    assert line, "%s: no pids printed: %r" % (what, output)
    pids = json.loads(line[0][len("E2E-PIDS "):])
    h.track(*pids.values())
    return pids


def tree(srv, kernel_pid, what):
    """The supervisor of kernel_pid (checked to be tfgpu-kernel run, started
    by the server srv, or a standby that took over) and every live process
    under it but a waiting standby, all tracked."""
    sup = ppid(kernel_pid)
    cmd = h.cmdline(sup)
    assert os.path.basename(cmd.split()[0]) == "tfgpu-kernel" and (" run " in cmd or h.is_standby(sup)), "%s: the kernel's parent %d is %r" % (what, sup, cmd)
    # A standby that took over the start with its spare kernel is the
    # supervisor then; the server's child is the stub that forwards to it.
    assert ppid(sup) == srv.proc.pid or h.is_standby(sup), "%s: the supervisor %d is not the server's child" % (what, sup)
    pids = h.tree_below(sup)
    h.track(*pids)
    return sup, pids


def check_ps(bin, kernel_id, sup, pids, what, old=(), notebook=None):
    """ps --json has one row for kernel_id, of supervisor sup, listing pids
    (and none of old), with WANT_GPU on the devices, and, given notebook,
    that notebook's path."""
    row = ps_row(bin, kernel_id)
    assert row, "%s: ps --json has no row for kernel %s: %s" % (what, kernel_id, ps_json(bin))
    listed = set(row["pids"] or [])
    gpu = {g["index"]: g["used_bytes"] for g in row["gpu"] or [] if g["used_bytes"]}
    h.note(**{"ps_" + what: {k: row.get(k) for k in ("supervisor_pid", "kernel_pid", "session", "pids", "state", "gpu")}})
    assert row["supervisor_pid"] == sup, "%s: ps supervisor_pid %s, want %d" % (what, row["supervisor_pid"], sup)
    assert set(pids) <= listed, "%s: ps pids %s lack %s" % (what, sorted(listed), sorted(set(pids) - listed))
    assert not listed & set(old), "%s: ps still lists pids of the old tree: %s" % (what, sorted(listed & set(old)))
    assert gpu == WANT_GPU, "%s: ps gpu %s, want used_bytes %s" % (what, row["gpu"], WANT_GPU)
    if notebook is not None:
        assert row["session"].endswith(notebook), "%s: ps notebook %r, the browser has %r open" % (what, row["session"], notebook)
