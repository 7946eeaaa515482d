"""TestE2EHub's driver (cmd/tfgpu-kernel/e2e_hub_test.go): drives JupyterHub
(batchspawner's SlurmSpawner on the test's one-node Slurm cluster) as root,
over the hub's REST API with the e2e-driver service's token, and each real
user's single-user server through the proxy with a token the hub made for
that user (scope access:servers!user=NAME): the server's REST API and its
kernel websocket (JSON messages, as JupyterLab sends them).

argv[1:] are the stages, in order (E2E_HUB_USERS names the two users):

  a      the first user's server spawned as a Slurm job; a tfgpu kernel
         whose cell starts a setsid'd double-forked SIGTERM-ignoring daemon
         and a SIGTERM-ignoring child; restart through the server: the old
         tree must go (waited for, harness.GONE_WAIT, the time noted), the
         new kernel answer; the same children again; the hub stops the
         server (DELETE /users/NAME/server): the job must leave the queue
         and nothing be left: no process of the user, no file of the
         kernel in the user's state directory, no tfgpu-* cgroup of it.
  b      the same on the second user's server with the stock ipykernel
         kernelspec ("python3", the venv's own) beside a tfgpu kernel: what
         the stock kernel leaves after restart and after the job is noted,
         never asserted; the tfgpu kernel's is.
  c      culling: the first user's server's kernel culler
         (MappingKernelManager.cull_idle_timeout, no client connected)
         shuts down an idle tfgpu kernel with such children: its tree, its
         files in the state directory, its inner directory and cgroups are
         gone. Then jupyterhub-idle-culler, run as the hub's idle-culler
         service, culls both users' servers (the second one's with a live
         tfgpu kernel and its children): nothing is left, as after a stop.
  d      root's `tfgpu-kernel ps` lists the user's kernel (its user, its
         supervisor, the daemon in its tree; its record names the job);
         `stop --idle-for 1s --user NAME` once ps says it is idle, then
         `stop NAME:ID`: each parks it (the tree gone, ps says parked by
         root), and the next cell runs in a fresh kernel and is told; the
         hub's stop then leaves nothing.

Each check waits for its event with a bound; what it took is noted in
FACTS. Every process made through a kernel is tracked for the Go side's
survivor check (the stock kernel's are not: they may outlive a restart).
"""

import asyncio
import glob
import json
import os
import pwd
import subprocess
import sys
import time
import uuid

import harness as h
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

E = os.environ
HUB = E["E2E_HUB_URL"]  # the proxy: http://127.0.0.1:PORT
TOKEN = E["E2E_HUB_DRIVER_TOKEN"]
BIN = E["E2E_TFGPU_BIN"]
USERS = E["E2E_HUB_USERS"].split(",")
SPAWN_WAIT = 150  # a job's start: sbatch, slurmd, the server's import; a bound only a failure reaches
JOB_WAIT = 60  # the job out of the queue after the hub stopped it (KillWait is 60 s)
STOCK = "python3"
TFGPU = "tfgpu"
# One event loop for every websocket (tornado's connect binds to the
# current loop).
LOOP = asyncio.new_event_loop()
asyncio.set_event_loop(LOOP)


# ---------------------------------------------------------------- HTTP


request = h.http


def hub(method, path, body=None, ok=(200, 201, 202, 204)):
    code, out = request(method, HUB + "/hub/api" + path, TOKEN, body)
    assert code in ok, "hub %s %s: HTTP %s %s" % (method, path, code, out)
    return out


class User:
    def __init__(self, name):
        self.name = name
        pw = pwd.getpwnam(name)
        self.uid, self.home = pw.pw_uid, pw.pw_dir
        self.token = None
        self.job = None
        self.jobs = []

    def api(self, method, path, body=None, ok=(200, 201, 202, 204), timeout=60):
        code, out = request(method, "%s/user/%s/api%s" % (HUB, self.name, path), self.token, body, timeout=timeout)
        assert code in ok, "%s's server: %s %s: HTTP %s %s" % (self.name, method, path, code, out)
        return out

    def processes(self):
        """The user's live processes (the user was made for the test: every
        one of them is the test's)."""
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                if os.stat("/proc/" + d).st_uid == self.uid and h.alive(int(d)):
                    out.append(int(d))
            except OSError:
                pass
        return out

    def state_files(self, kernel_ids):
        """Files of the kernels in the user's state directories (the
        supervisor's default: ~/.local/state/tfgpu-kernel/HOSTNAME)."""
        out = []
        for d in glob.glob(os.path.join(self.home, ".local", "state", "tfgpu-kernel", "*")):
            for f in os.listdir(d):
                if any(k in f for k in kernel_ids):
                    out.append(os.path.join(d, f))
        return out


def setup(u):
    hub("POST", "/users/" + u.name, ok=(201, 409))
    tok = hub("POST", "/users/%s/tokens" % u.name, {"scopes": ["access:servers!user=" + u.name], "note": "e2e"})
    u.token = tok["token"]


def spawn(u):
    """Start u's server; wait until the hub says it is ready; return the
    seconds it took and note the job."""
    t0 = time.monotonic()
    hub("POST", "/users/%s/server" % u.name, ok=(201, 202))
    while True:
        info = hub("GET", "/users/" + u.name)
        srv = (info.get("servers") or {}).get("")
        if srv and srv.get("ready"):
            break
        assert time.monotonic() - t0 < SPAWN_WAIT, "%s's server not ready %ss after the spawn: %s" % (u.name, SPAWN_WAIT, info)
        time.sleep(0.25)
    took = time.monotonic() - t0
    u.job = str((srv.get("state") or {}).get("job_id") or "")
    assert u.job, "the hub's state of %s's server names no Slurm job: %s" % (u.name, srv)
    u.jobs.append(u.job)
    h.FACTS.setdefault("jobs", []).append(u.job)
    h.log("%s's server ready in job %s after %.2f s (%s)" % (u.name, u.job, took, srv.get("url")))
    return took


def squeue(job):
    p = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=30)
    if p.returncode != 0 and "Invalid job id" in p.stderr:
        return ""
    return p.stdout.strip()


def job_cgroup_procs(job):
    """Processes in job's cgroups of any hierarchy (slurm*/uid_*/job_ID)."""
    out = set()
    for d in glob.glob("/sys/fs/cgroup/*/slurm*/uid_*/job_%s" % job) + glob.glob("/sys/fs/cgroup/slurm*/uid_*/job_%s" % job):
        for root, _, files in os.walk(d):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(root, "cgroup.procs")) as f:
                        out.update(int(x) for x in f.read().split())
                except OSError:
                    pass
    return sorted(out)


def tfgpu_cgroups(kernel_ids):
    out = []
    for mnt in glob.glob("/sys/fs/cgroup/*") + ["/sys/fs/cgroup"]:
        for root, dirs, _ in os.walk(mnt):
            if root.count("/") > 10:
                dirs[:] = []
                continue
            for d in dirs:
                if d.startswith("tfgpu-") and any(k in d for k in kernel_ids):
                    out.append(os.path.join(root, d))
    return sorted(set(out))


def in_job(pid, job):
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            return "/job_%s/" % job in f.read()
    except OSError:
        return False


# ---------------------------------------------------------------- kernels


class Kernel:
    """A kernel of u's server, started through its REST API, talked to
    through its websocket."""

    def __init__(self, u, name):
        self.u, self.name = u, name
        t0 = time.monotonic()
        k = u.api("POST", "/kernels", {"name": name})
        self.id = k["id"]
        h.FACTS.setdefault("kernel_ids", []).append(self.id)
        self.session = uuid.uuid4().hex
        self.ws = None
        self.connect()
        self.execute("1+1", timeout=120)  # the kernel answers: a notebook's first cell
        self.ready_s = time.monotonic() - t0

    def connect(self):
        url = "%s/user/%s/api/kernels/%s/channels?session_id=%s" % (
            HUB.replace("http://", "ws://"), self.u.name, self.id, self.session)
        req = HTTPRequest(url, headers={"Authorization": "token " + self.u.token}, request_timeout=60)
        self.ws = LOOP.run_until_complete(websocket_connect(req))

    def close(self):
        if self.ws is not None:
            self.ws.close()
            self.ws = None
            LOOP.run_until_complete(asyncio.sleep(0.05))  # the close frame on its way

    def execute(self, code, timeout=60):
        """Run code; returns (stdout text, reply content), and keeps what it
        wrote on stderr in self.stderr. Waits for the reply and the
        kernel's idle for this request."""
        msg_id = uuid.uuid4().hex
        msg = {
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": self.u.name,
                       "session": self.session, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "version": "5.3"},
            "parent_header": {}, "metadata": {}, "buffers": [], "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }
        return LOOP.run_until_complete(self._execute(msg, msg_id, timeout))

    async def _execute(self, msg, msg_id, timeout):
        self.stderr = []
        await self.ws.write_message(json.dumps(msg))
        deadline = time.monotonic() + timeout
        out, reply, idle = [], None, False
        while reply is None or not idle:
            left = deadline - time.monotonic()
            assert left > 0, "%s kernel %s: no reply and idle within %ss (stdout so far %r)" % (self.name, self.id, timeout, out)
            raw = await asyncio.wait_for(self.ws.read_message(), left)
            assert raw is not None, "%s kernel %s: the websocket closed" % (self.name, self.id)
            m = json.loads(raw)
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            t = m["msg_type"]
            if t == "stream" and m["content"]["name"] == "stdout":
                out.append(m["content"]["text"])
            elif t == "stream":
                self.stderr.append(m["content"]["text"])
            elif t == "error":
                out.append("ERROR %s: %s" % (m["content"]["ename"], m["content"]["evalue"]))
            elif t == "execute_reply":
                reply = m["content"]
            elif t == "status" and m["content"]["execution_state"] == "idle":
                idle = True
        return "".join(out), reply

    def children(self):
        """harness.SPAWN_CHILDREN in the kernel: {"kernel", "daemon",
        "stubborn"} pids, checked to run as the user in the job."""
        out, reply = self.execute(h.SPAWN_CHILDREN, timeout=60)
        assert reply["status"] == "ok", "spawn children: %s %s" % (reply, out)
        line = [l for l in out.splitlines() if l.startswith("E2E-PIDS ")]
        assert line, "spawn children printed %r" % out
        pids = json.loads(line[0][len("E2E-PIDS "):])
        for role, p in pids.items():
            assert h.alive(p), "%s (pid %d) not running" % (role, p)
            assert os.stat("/proc/%d" % p).st_uid == self.u.uid, "%s (pid %d) is not %s's" % (role, p, self.u.name)
            assert in_job(p, self.u.job), "%s (pid %d) is not in job %s's cgroups" % (role, p, self.u.job)
        if self.name == TFGPU:
            h.track(*pids.values())
        return pids

    def tree(self, pids):
        """The kernel's processes as far as the test watches them: the
        kernel, its children and, for tfgpu, its supervisor and the
        supervisor's descendants but a waiting standby and its spare."""
        out = set(pids.values())
        if self.name == TFGPU:
            sup = supervisor_of(self.u, self.id)
            if sup:
                out |= h.tree_below(sup) | {sup}
        out = sorted(p for p in out if h.alive(p))
        if self.name == TFGPU:
            h.track(*out)
        return out


def supervisor_of(u, kernel_id):
    for f in u.state_files([kernel_id]):
        if f.endswith("/%s.json" % kernel_id):
            try:
                with open(f) as fh:
                    p = json.load(fh).get("supervisor_pid")
            except (OSError, ValueError):
                return None
            return p if p and h.alive(p) else None
    return None


def settle(k):
    """Waits until root's `tfgpu-kernel ps --json` shows the tfgpu kernel's
    spare ready (or says why it keeps none): the kernel's steady state, a
    user's seconds after a start or restart. What the test does next (a
    restart, a stop, a cull) then meets the standby and spare as they
    live, not half-started: a scancel while they start can leave their
    .standby and .spare files (the finding this wait keeps out of the
    other checks; the next start on the node or `stop ID` finishes them)."""
    if k.name != TFGPU:
        return
    t0 = time.monotonic()
    while True:
        p = subprocess.run([BIN, "ps", "--json"], capture_output=True, text=True, timeout=60)
        rows = [r for r in json.loads(p.stdout or "[]") if r.get("kernel_id") == k.id]
        spare = (rows[0].get("spare") or {}) if rows else {}
        ready = spare.get("ready") or "0001-"  # Go's zero time: not yet
        if not ready.startswith("0001-") or spare.get("off"):
            return
        assert time.monotonic() - t0 < h.GONE_WAIT, "ps never shows kernel %s's spare ready: %s" % (k.id, rows)
        time.sleep(0.1)


def restart(k, what):
    """Children, then a restart through the server; the old tree must go
    (tfgpu; the stock kernel's leftovers are noted) and the new kernel
    answer. Returns the restart's figures."""
    pids = k.children()
    settle(k)  # the restart takes the spare over, as a user's does
    old = k.tree(pids)
    t0 = time.monotonic()
    k.u.api("POST", "/kernels/%s/restart" % k.id, timeout=120)
    restart_s = time.monotonic() - t0
    wait = h.GONE_WAIT if k.name == TFGPU else 2
    left, took = h.wait_gone(lambda: h.survivors(old), timeout=wait)
    fig = {"restart_s": round(restart_s, 3)}
    if left:
        fig["left_after_restart"] = h.describe(left)
    else:
        fig["old_tree_gone_s"] = round(restart_s + took, 3)
    if k.name == TFGPU:
        assert not left, "%s: after a restart through the server, the old tree is still alive %ss later: %s" % (what, wait, h.describe(left))
    else:
        h.log("stock kernel (%s): %d of the old tree's processes outlived the restart: %s" % (what, len(left), h.describe(left)))
    # A client that keeps its websocket across the restart sends a cell at
    # once: its output and idle come back on it (before the relay held a
    # returning client's request for its iopub subscription, nothing came
    # back once a spare kernel took the restart over; docs/design.md#a-returning-client).
    out, reply = k.execute("print('kept', 6*7)", timeout=60)
    assert reply["status"] == "ok" and "kept 42" in out, "%s: the cell sent on the kept websocket after the restart: %s %r" % (what, reply, out)
    # Then as JupyterLab does after a restart (@jupyterlab/services'
    # KernelConnection.restart: restartKernel, then reconnect), a fresh
    # websocket.
    k.close()
    k.connect()
    out, reply = k.execute("6*7\nprint('after restart', 6*7)", timeout=120)
    assert reply["status"] == "ok" and "after restart 42" in out, "%s: the restarted kernel: %s %r" % (what, reply, out)
    return fig, left


def hub_stop(u, kernels, stock_left=()):
    """DELETE /users/NAME/server; the hub reports the server gone; then
    server_gone's checks. Returns the figures."""
    inner = inner_dirs(u, kernels)
    for k in kernels:
        k.close()
    t0 = time.monotonic()
    hub("DELETE", "/users/%s/server" % u.name, ok=(202, 204))
    return server_gone(u, kernels, t0, "the hub stopped", stock_left, inner)


def inner_dirs(u, kernels):
    """The inner directories (connection file, sockets) the kernels'
    records name."""
    out = []
    for f in u.state_files([k.id for k in kernels]):
        if f.endswith(".json"):
            try:
                with open(f) as fh:
                    d = json.load(fh).get("inner_dir")
            except (OSError, ValueError):
                continue
            if d:
                out.append(d)
    return out


def server_gone(u, kernels, t0, how, stock_left=(), inner=()):
    """Waits until the hub no longer lists u's server and its job left the
    queue; then nothing of the user's may be left: processes, the kernels'
    files in the state directory, tfgpu-* cgroups of the kernels, processes
    in the job's cgroups (the stock kernel's stock_left are only noted).
    Returns the figures, in seconds since t0."""
    ids = [k.id for k in kernels]
    while True:
        info = hub("GET", "/users/" + u.name)
        if not (info.get("servers") or {}).get(""):
            break
        assert time.monotonic() - t0 < SPAWN_WAIT, "the hub still lists %s's server %ss after %s it: %s" % (u.name, SPAWN_WAIT, how, info)
        time.sleep(0.1)
    fig = {"server_gone_s": round(time.monotonic() - t0, 3)}
    left, _ = h.wait_gone(lambda: squeue(u.job), timeout=JOB_WAIT, interval=0.1)
    assert not left, "job %s still in the queue (%s) %ss after %s %s's server" % (u.job, left, JOB_WAIT, how, u.name)
    fig["job_gone_s"] = round(time.monotonic() - t0, 3)
    ignore = set(stock_left)

    def what_is_left():
        out = []
        procs = [p for p in u.processes() if p not in ignore]
        if procs:
            out.append("processes of %s: %s" % (u.name, h.describe(procs)))
        files = u.state_files(ids)
        if files:
            out.append("files of the kernels in the state directory: %s" % files)
        cgs = tfgpu_cgroups(ids)
        if cgs:
            out.append("tfgpu cgroups: %s" % cgs)
        dirs = [d for d in inner if os.path.exists(d)]
        if dirs:
            out.append("the kernels' inner directories: %s" % dirs)
        jp = [p for p in job_cgroup_procs(u.job) if p not in ignore]
        if jp:
            out.append("processes in job %s's cgroups: %s" % (u.job, h.describe(jp)))
        return out

    left, _ = h.wait_gone(what_is_left, timeout=h.GONE_WAIT, interval=0.1)
    assert not left, "%ss after job %s left the queue (%s %s's server):\n  %s" % (
        h.GONE_WAIT, u.job, how, u.name, "\n  ".join(left))
    fig["nothing_left_s"] = round(time.monotonic() - t0, 3)
    if stock_left:
        alive = h.survivors(list(stock_left))
        fig["stock_left_after_job"] = h.describe(alive)
        h.log("the stock kernel's processes that outlived its restart, after the job: %s" % (h.describe(alive) or "none alive"))
    return fig


def kernel_gone(u, k, tree, t0, how, inner=()):
    """The kernel's tree, its files in the state directory and its tfgpu-*
    cgroups are gone (waited for, harness.GONE_WAIT); returns the seconds
    since t0."""
    def what_is_left():
        out = []
        if h.survivors(tree):
            out.append("processes: %s" % h.describe(h.survivors(tree)))
        if u.state_files([k.id]):
            out.append("files in the state directory: %s" % u.state_files([k.id]))
        if tfgpu_cgroups([k.id]):
            out.append("tfgpu cgroups: %s" % tfgpu_cgroups([k.id]))
        if [d for d in inner if os.path.exists(d)]:
            out.append("its inner directory: %s" % list(inner))
        return out
    left, _ = h.wait_gone(what_is_left, timeout=h.GONE_WAIT, interval=0.1)
    assert not left, "%ss after %s kernel %s of %s:\n  %s" % (h.GONE_WAIT, how, k.id, u.name, "\n  ".join(left))
    return round(time.monotonic() - t0, 3)


# ---------------------------------------------------------------- stages


_USERS = {}


def user(i):
    """The i-th user, made in the hub with a token of its own the first time."""
    if i not in _USERS:
        u = _USERS[i] = User(USERS[i])
        setup(u)
    return _USERS[i]


def stage_a():
    u = user(0)
    fig = {"user": u.name, "spawn_s": round(spawn(u), 3)}
    k = Kernel(u, TFGPU)
    fig["kernel_ready_s"] = round(k.ready_s, 3)
    r, _ = restart(k, "tfgpu kernel of " + u.name)
    fig.update({"tfgpu_" + key: v for key, v in r.items()})
    k.children()  # running when the hub stops the server
    settle(k)
    fig.update(hub_stop(u, [k]))
    h.note(stage_a=fig)


def stage_b():
    u = user(1)
    fig = {"user": u.name, "spawn_s": round(spawn(u), 3)}
    ours = Kernel(u, TFGPU)
    stock = Kernel(u, STOCK)
    r, _ = restart(ours, "tfgpu kernel of " + u.name)
    fig.update({"tfgpu_" + key: v for key, v in r.items()})
    r, stock_left = restart(stock, "stock kernel of " + u.name)
    fig.update({"stock_" + key: v for key, v in r.items()})
    ours.children()
    settle(ours)
    stock_pids = stock.children()
    fig["stock_children_at_stop"] = stock_pids
    fig.update(hub_stop(u, [ours, stock], stock_left=list(stock_left) + list(stock_pids.values())))
    h.note(stage_b=fig)


def stage_c():
    """The single-user server's kernel culler (cull_idle_timeout, E2E_HUB_KERNEL_CULL
    seconds, no client connected) shuts down an idle tfgpu kernel with
    escaping children: nothing of it is left. Then the idle culler, run as
    the hub's idle-culler service, culls both users' servers, the second
    one's with a live tfgpu kernel and its children: nothing is left."""
    a, b = user(0), user(1)
    fig = {"spawn_s": [round(spawn(a), 3), round(spawn(b), 3)]}
    ka = Kernel(a, TFGPU)
    tree = ka.tree(ka.children())
    settle(ka)
    inner = inner_dirs(a, [ka])
    ka.close()
    t0 = time.monotonic()
    wait = float(E["E2E_HUB_KERNEL_CULL"]) + 10 + h.GONE_WAIT
    while ka.id in [k["id"] for k in a.api("GET", "/kernels")]:
        assert time.monotonic() - t0 < wait, "the server's kernel culler left idle kernel %s %ss" % (ka.id, wait)
        time.sleep(0.25)
    fig["kernel_culled_after_s"] = round(time.monotonic() - t0, 3)
    fig["kernel_culled_nothing_left_s"] = kernel_gone(a, ka, tree, t0, "the kernel culler culled", inner)

    kb = Kernel(b, TFGPU)
    kb.children()
    settle(kb)
    kb.close()
    inner = inner_dirs(b, [kb])
    culler = h.spawn_helper([sys.executable, "-m", "jupyterhub_idle_culler", "--url=" + E["E2E_HUB_API_URL"],
                             "--timeout=10", "--cull-every=2"],
                            env=dict(E, JUPYTERHUB_API_TOKEN=E["E2E_HUB_CULLER_TOKEN"]), stdin=subprocess.DEVNULL)
    t0 = time.monotonic()
    try:
        fig["culled_b"] = server_gone(b, [kb], t0, "the idle culler culled", inner=inner)
        fig["culled_a"] = server_gone(a, [ka], t0, "the idle culler culled")
    finally:
        culler.kill()
        culler.wait(10)
    h.note(stage_c=fig)


def iso(t):
    import datetime
    return datetime.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()


def run_bin(*args):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60)
    shown = p.stdout if "--json" not in args else p.stdout[:200] + "…"
    h.log("tfgpu-kernel %s: exit %d\n%s%s" % (" ".join(args), p.returncode, shown, p.stderr))
    return p


def stage_d():
    """Root's `tfgpu-kernel ps` lists the user's kernel in its Slurm job;
    `stop --idle-for` and `stop USER:ID` park it (the tree gone, the next
    cell in a fresh kernel); the hub's stop then leaves nothing."""
    u = user(0)
    fig = {"spawn_s": round(spawn(u), 3)}
    k = Kernel(u, TFGPU)
    pids = k.children()
    tree = k.tree(pids)
    sup = supervisor_of(u, k.id)
    rows = json.loads(run_bin("ps", "--json").stdout)
    row = [r for r in rows if r.get("kernel_id") == k.id]
    assert len(row) == 1, "root's ps --json lists %s's kernel %s %d times: %s" % (u.name, k.id, len(row), rows)
    row = row[0]
    assert row["user"] == u.name and row["state"] == "running" and row["supervisor_pid"] == sup \
        and pids["daemon"] in row["pids"], "root's ps row of %s's kernel: %s" % (u.name, row)
    with open([f for f in u.state_files([k.id]) if f.endswith("/%s.json" % k.id)][0]) as f:
        rec = json.load(f)
    assert (rec.get("slurm") or {}).get("job") == u.job, "the record does not name job %s: %s" % (u.job, rec)
    table = run_bin("ps").stdout
    assert k.id[:8] in table, "root's ps table does not list %s:\n%s" % (k.id, table)
    # --idle-for 1s acts on a kernel idle at least 1 s: wait until ps says so.
    t0 = time.monotonic()
    while True:
        r = [r for r in json.loads(run_bin("ps", "--json").stdout) if r.get("kernel_id") == k.id][0]
        last = r.get("last_activity")
        if r["execution_state"] == "idle" and last and time.time() - iso(last) > 1.5:
            break
        assert time.monotonic() - t0 < h.GONE_WAIT, "ps never shows %s idle: %s" % (k.id, r)
        time.sleep(0.2)
    assert k.id[:8] in table, "root's ps table does not list %s:\n%s" % (k.id, table)

    # --user: root's stop acts on every user's kernels on the host, and
    # this host runs others' tests.
    for key, how in (("stop_idle_for", ["stop", "--idle-for", "1s", "--user", u.name]),
                     ("stop_user_id", ["stop", "%s:%s" % (u.name, k.id)])):
        t0 = time.monotonic()
        out = run_bin(*how)
        assert out.returncode == 0 and "parked by its supervisor" in out.stdout, "root's %s: %r %r" % (how, out.stdout, out.stderr)
        old = [p for p in tree if p != sup and BIN not in h.cmdline(p)]  # the watcher stays with its supervisor
        left = h.wait_dead(old, h.GONE_WAIT)
        assert not left, "root's %s: the tree alive %ss later: %s" % (how, h.GONE_WAIT, h.describe(left))
        fig[key + "_tree_gone_s"] = round(time.monotonic() - t0, 3)
        row = [r for r in json.loads(run_bin("ps", "--json").stdout) if r.get("kernel_id") == k.id]
        assert row and row[0]["state"] == "parked" and row[0]["parked"]["by"] == "root", "root's ps after %s: %s" % (how, row)
        out, reply = k.execute("import os; print(os.getpid())", timeout=120)
        fresh = int(out.strip())
        assert reply["status"] == "ok" and fresh not in tree, "the first cell after %s: %s %r" % (how, reply, out)
        told = "".join(k.stderr)
        assert "stopped by root" in told and "This is a fresh kernel." in told, "the first cell after %s was told %r" % (how, told)
        fig.setdefault("told", []).append(told)
        tree = k.tree(k.children())
    settle(k)
    fig.update(hub_stop(u, [k]))
    h.note(stage_d=fig)


STAGES = {"a": stage_a, "b": stage_b, "c": stage_c, "d": stage_d}


def main():
    for s in sys.argv[1:]:
        h.log("stage %s" % s)
        STAGES[s]()


if __name__ == "__main__":
    h.run(main)
