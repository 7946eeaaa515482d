"""The capture behind docs/img/processes.svg, the picture of one kernel's
processes (docs/design.md#processes, issue 32): TestE2EFigureProcesses
runs it on the tfgpu kernelspec with the spare on, as root.

This process plays Jupyter's server: a KernelManager launches the
kernelspec's `tfgpu-kernel run`. A cell starts a worker in a session of
its own (`sleep`, start_new_session), so the kernel's tree has a process
beside the kernel. Two moments are captured, each once the processes
stand still: "running" (the kernel ready, its standby's spare waiting)
and "restarted" (after km.restart_kernel(), the old tree gone and the
new standby's spare waiting).

For each moment, for this process and every process root's `tfgpu-kernel
ps --json` lists for the kernel: pid, ppid, the role ps gives it ("jupyter
server" for this process), the command line as `ps -o args` shows it and
/proc/PID/cgroup; ps's own row (containment, cgroup, spare) beside them,
and every process below this one. Facts: "moments" [{name, kernel_id,
ps, processes, below_server, stable_after}],
"server", "jupyter_client", "ipykernel". Nothing about the picture is
asserted here: the Go side asserts what the picture shows."""

import json
import os
import subprocess
import time

import harness as h

SERVER_ROLE = "jupyter server"

WORKER = r'''
import subprocess
_e2e_w = subprocess.Popen(["sleep", "3600"], start_new_session=True,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("E2E-WORKER", _e2e_w.pid)
'''


def kernel_id(km):
    return os.path.basename(km.connection_file)[len("kernel-") : -len(".json")]


def spare_record(km):
    try:
        with open(os.path.join(h.state_dir(), kernel_id(km) + ".spare")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def wait_spare(km, not_pid=0, timeout=60):
    """The spare's record once its standby wrote it (its imports done),
    other than the spare not_pid (the one a restart used)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sp = spare_record(km)
        if sp and sp.get("pid") and sp["pid"] != not_pid and h.alive(sp["pid"]) and h.alive(sp["standby_pid"]):
            h.track(sp["pid"], sp["standby_pid"])
            return sp
        time.sleep(0.1)
    raise AssertionError("no spare kernel (other than %d) recorded for %s within %ss" % (not_pid, kernel_id(km), timeout))


def ps_row(km):
    """Root's `tfgpu-kernel ps --json` row of km's kernel (None: not listed)."""
    out = subprocess.run([os.environ["E2E_TFGPU_BIN"], "ps", "--json"], capture_output=True, text=True, timeout=30)
    rows = json.loads(out.stdout or "[]")
    for r in rows:
        if r.get("kernel_id") == kernel_id(km):
            return r
    return None


def ps_args():
    """{pid: (ppid, args)} of every process, as `ps -o args` shows them."""
    out = subprocess.run(["ps", "-ww", "-e", "-o", "pid=,ppid=,args="], capture_output=True, text=True, timeout=30, check=True)
    procs = {}
    for line in out.stdout.splitlines():
        f = line.split(None, 2)
        if len(f) >= 2:
            procs[int(f[0])] = (int(f[1]), f[2] if len(f) > 2 else "")
    return procs


def cgroup_of(pid):
    """/proc/PID/cgroup, as its lines."""
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            return [l.strip() for l in f if l.strip()]
    except OSError:
        return []


def capture(km, name, tries=50):
    """One moment: ps's row, every process below this one and, for this
    process and each of the kernel's, what ps -o args and /proc/PID/cgroup
    say.
    Taken again until two looks in a row agree (the same pids, parents,
    command lines and cgroups), so what is recorded held for a while and
    is not a process half-way through a change."""
    server = os.getpid()
    last = None
    for i in range(tries):
        row = ps_row(km)
        procs = ps_args()
        members = (row or {}).get("processes") or []
        pids = [server] + [m["pid"] for m in members]
        got = []
        for p in pids:
            ppid, args = procs.get(p, (0, None))
            got.append({"pid": p, "ppid": ppid, "role": SERVER_ROLE if p == server else None,
                        "args": args, "cgroup": cgroup_of(p)})
        for g, m in zip(got[1:], members):
            g["role"] = m["role"]
        h.track(*pids[1:])
        snap = {"name": name, "kernel_id": kernel_id(km), "ps": row, "processes": got,
                "below_server": sorted(h.descendants(server))}
        if row and last is not None and all(g["args"] is not None for g in got) and \
                (last["processes"], last["below_server"]) == (got, snap["below_server"]):
            snap["stable_after"] = i + 1
            return snap
        last = snap
        time.sleep(0.2)
    raise AssertionError("the processes of %s did not stand still over %d looks; the last:\n%s" % (name, tries, json.dumps(last, indent=1)))


def main():
    import ipykernel
    import jupyter_client

    h.note(jupyter_client=jupyter_client.__version__, ipykernel=ipykernel.__version__, server=os.getpid())
    km, kc = h.start_kernel()
    r = h.ok(h.execute(kc, WORKER), "start the worker")
    worker = [int(l.split()[1]) for l in r["stdout"].splitlines() if l.startswith("E2E-WORKER ")]
    assert worker, "the worker cell printed %r" % r["stdout"]
    h.track(*worker)
    sp = wait_spare(km)
    running = capture(km, "running")
    old = [p["pid"] for p in running["processes"][1:] if p["role"] not in ("standby", "standby-watcher", "spare")]

    km.restart_kernel()
    kc.stop_channels()
    kc = h.connect(km)
    h.track(km.provisioner.pid)
    left = h.wait_dead(old, 5.0)
    assert not left, "the old kernel's processes outlived the restart: %s" % h.describe(left)
    wait_spare(km, not_pid=sp["pid"])
    restarted = capture(km, "restarted")
    h.note(worker=worker[0], moments=[running, restarted])
    km.shutdown_kernel()


h.run(main)
