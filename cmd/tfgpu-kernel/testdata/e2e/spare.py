"""The spare kernel (issue 25, docs/design.md#spare-kernel). argv[1]:

"adopt": while a kernel runs, its supervisor keeps a spare: a standby
supervisor with a Python that has imported ipykernel, outside the kernel's
process tree, process group and cgroup, shown by `ps --json`. restart_kernel()
then makes the spare the kernel (same pid), the old tree is gone as before,
the process jupyter_client started is a stub that forwards a signal-mode
interrupt and exits with the supervisor's code; a second restart uses the
next spare; a kernel death is mirrored in the stub's exit code; shutting the
dead kernel down ends the waiting standby and its spare. A profile startup
file written while the spare waited runs in the kernel it becomes.

"stale": a package installed in the notebook (a real `pip install` of a
local wheel into the venv on today's stack; the user site directory created
on Debian's, as a first `pip install --user` does) makes the spare stale:
the restart starts Python cold and the new package imports.

"off": TFGPU_SPARE=0: no standby is started, the restart starts cold.

"preload": TFGPU_PRELOAD names a module: the kernel after the restart has it
imported already, before the restart began.

"age": TFGPU_SPARE_MAX_AGE=3s: the spare is replaced by a fresh one when it
is three seconds old, the old one gone; the restart uses the fresh one.

"kept": a client kept across restarts (a jupyter_client KernelClient, as
jupyter_server keeps one behind a websocket) sends a cell as soon as
restart_kernel() returns, four times: the spare, which answers at once, must
not publish the cell's output and idle to no one before the client's SUB is
back (iopub replays its first 2 s, zmtp.ReplayFor): each cell's reply,
stdout and idle arrive.

"gpu" (with the fake NVML): the preloaded module holds a GPU context on
import, as one that initialises CUDA would: the spare is discarded, logged
once with what it imported, ps says why there is none, the restart is cold
and its supervisor keeps no spare either."""

import glob
import json
import os
import subprocess
import sys
import time
import zipfile

import harness as h

WHAT = sys.argv[1] if len(sys.argv) > 1 else "adopt"


def ppid(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    return int(s[s.rindex(")") + 2 :].split()[1])


def pgid(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    return int(s[s.rindex(")") + 2 :].split()[2])


def cgroups(pid):
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            return set(l.strip() for l in f if "tfgpu-" in l)
    except OSError:
        return set()


def kernel_id(km):
    return os.path.basename(km.connection_file)[len("kernel-") : -len(".json")]


def wait_spare(km, timeout=60):
    """The spare's record, once its standby wrote it (the imports are done)."""
    path = os.path.join(h.state_dir(), kernel_id(km) + ".spare")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                sp = json.load(f)
            if h.alive(sp["pid"]) and h.alive(sp["standby_pid"]):
                h.track(sp["pid"], sp["standby_pid"])
                return sp
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError("no spare kernel recorded at %s within %ss" % (path, timeout))


def ps_row(km):
    out = subprocess.run([os.environ["E2E_TFGPU_BIN"], "ps", "--json"], capture_output=True, text=True, timeout=30)
    rows = json.loads(out.stdout or "[]")
    if isinstance(rows, dict):
        rows = rows.get("kernels", [])
    for r in rows:
        if r.get("kernel_id") == kernel_id(km):
            return r
    return None


def doctor():
    out = subprocess.run([os.environ["E2E_TFGPU_BIN"], "doctor"], capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


def restart(km, kc):
    t0 = time.monotonic()
    km.restart_kernel()
    kc.stop_channels()
    kc = h.connect(km)
    return kc, round(time.monotonic() - t0, 3)


def adopt():
    km, kc = h.start_kernel(interrupt_mode="signal")
    kpid = h.kernel_pid(kc)
    sup = h.supervisor_pid(km)
    sp = wait_spare(km)
    row = ps_row(km)
    h.note(kernel=kpid, supervisor=sup, spare=sp, ps_spare=row and row.get("spare"))
    # Not of the kernel's tree: not below it, not in its process group or
    # cgroups; its standby is in a session of its own.
    old = h.tree_of(km)
    h.check(sp["pid"] not in old and sp["standby_pid"] not in old, "the spare or its standby is counted in the kernel's tree: %s" % h.describe(old))
    h.check(sp["pid"] not in h.descendants(kpid), "the spare is below the kernel")
    h.check(pgid(sp["pid"]) != pgid(kpid) and pgid(sp["standby_pid"]) != pgid(sup), "the spare shares a process group with the kernel or its supervisor")
    h.check(not (cgroups(sp["pid"]) & cgroups(kpid)) or not cgroups(kpid), "the spare shares the kernel's cgroup: %s" % (cgroups(sp["pid"]) & cgroups(kpid)))
    h.check(ppid(sp["standby_pid"]) == sup, "the standby %d is not the supervisor's child" % sp["standby_pid"])
    h.check(row is not None and (row.get("spare") or {}).get("pid") == sp["pid"] and (row.get("spare") or {}).get("rss_bytes", 0) > 0,
            "ps --json does not show the spare on its kernel's row: %s" % (row and row.get("spare")))
    # ps names the waiting spare's kernel, and shows the kernel it became
    # as a cold-started one (pgrep -f ipykernel_launcher finds it).
    title = "(tfgpu-kernel spare for kernel %s)" % kernel_id(km)[:8]
    shown = h.cmdline(sp["pid"])
    h.check(shown == "%s %s" % (shown.split()[0], title), "ps does not show the waiting spare as PYTHON %s: %s" % (title, shown[:200]))
    doc = doctor()
    h.check(" kernels keep a spare kernel for their next restart" in doc, "doctor does not report the spare:\n%s" % doc)

    # A startup file added after the spare imported still runs in the
    # kernel it becomes: the profile is read after `go`.
    startup = os.path.join(os.environ["IPYTHONDIR"], "profile_default", "startup")
    os.makedirs(startup, exist_ok=True)
    with open(os.path.join(startup, "50-e2e.py"), "w") as f:
        f.write("E2E_STARTUP = 'ran'\n")
    kids = h.spawn_children(kc)
    old = sorted(set(old + list(kids.values())))
    kc, took = restart(km, kc)
    left = h.wait_dead(old, 2.0)
    new = h.kernel_pid(kc)
    stub = km.provisioner.pid
    h.note(restart_s=took, new_kernel=new, stub=stub, stub_cmdline=h.cmdline(stub)[:200])
    h.check(not left, "processes of the old tree alive after the restart: %s" % h.describe(left))
    h.check(new == sp["pid"], "the kernel after the restart is pid %d, not the spare %d" % (new, sp["pid"]))
    h.check(ppid(new) == sp["standby_pid"], "the new kernel's parent is %d, not the standby %d" % (ppid(new), sp["standby_pid"]))
    h.check(h.supervisor_pid(km) == sp["standby_pid"], "the record does not name the standby as the supervisor")
    h.check(" -m ipykernel_launcher -f " in h.cmdline(new) and "tfgpu-kernel spare" not in h.cmdline(new),
            "ps does not show the spare that became the kernel as ipykernel_launcher: %s" % h.cmdline(new)[:200])
    h.check(" run " in h.cmdline(stub) and not h.is_standby(stub), "the process jupyter_client started is not a stub: %s" % h.cmdline(stub))
    h.assert_answers(kc, "the spare kernel after the restart")
    r = h.execute(kc, "print(E2E_STARTUP)")
    h.check(r["stdout"].strip() == "ran", "a startup file written after the spare imported did not run: %s" % r["reply"])

    # Interrupt (interrupt_mode signal: jupyter_client signals the stub).
    # Interrupted once the cell says it sleeps (waited for, not a 1 s sleep).
    msg = kc.execute("import time\nprint('SLEEPING', flush=True)\ntime.sleep(30)")
    r = h.collect(kc, msg, timeout=h.GONE_WAIT, stop=lambda r: "SLEEPING" in r["stdout"])
    h.check("SLEEPING" in r["stdout"], "the sleeping cell never started: %s" % h.types(r))
    km.interrupt_kernel()
    r = h.collect(kc, msg, timeout=h.GONE_WAIT)
    h.note(interrupt_reply=r["reply"] and {k: r["reply"].get(k) for k in ("status", "ename")})
    h.check(r["reply"] and r["reply"].get("ename") == "KeyboardInterrupt", "the interrupt through the stub did not reach the kernel: %s" % r["reply"])

    # The second restart uses the next spare, kept by the standby that is
    # the supervisor now.
    sp2 = wait_spare(km)
    h.check(sp2["pid"] != sp["pid"] and ppid(sp2["standby_pid"]) == sp["standby_pid"],
            "the next spare %s is not kept by the supervisor %d" % (sp2, sp["standby_pid"]))
    kc, took2 = restart(km, kc)
    new2 = h.kernel_pid(kc)
    h.note(restart2_s=took2, new_kernel2=new2)
    h.check(new2 == sp2["pid"], "the kernel after the second restart is pid %d, not the spare %d" % (new2, sp2["pid"]))
    left = h.wait_dead([sp["standby_pid"], new], 2.0)
    h.check(not left, "the first standby and its kernel outlived the second restart: %s" % h.describe(left))

    # A death: the stub exits with the kernel's code; shutting the dead
    # kernel down (no restart) ends the waiting standby and its spare.
    sp3 = wait_spare(km)
    stub = km.provisioner.pid
    kc.execute("import os; os._exit(7)")
    deadline = time.monotonic() + 20
    while km.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    rc = km.provisioner.process.returncode if km.provisioner and km.provisioner.process else None
    h.note(stub_returncode=rc)
    h.check(rc == 7, "the stub exited %s after the kernel's os._exit(7)" % rc)
    km.shutdown_kernel(now=True)
    left = h.wait_dead([sp3["pid"], sp3["standby_pid"]], 3.0)
    h.check(not left, "the standby and spare outlived the dead kernel's shutdown: %s" % h.describe(left))


def install_package(kc, name):
    """Install a one-module package the way a notebook user would."""
    if sys.prefix != sys.base_prefix:  # today's stack: a venv, and a real pip
        code = r'''
import os, subprocess, sys, tempfile, zipfile
d = tempfile.mkdtemp()
whl = os.path.join(d, "%(n)s-1.0-py3-none-any.whl")
with zipfile.ZipFile(whl, "w") as z:
    z.writestr("%(n)s.py", "VALUE = 42\n")
    z.writestr("%(n)s-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: %(n)s\nVersion: 1.0\n")
    z.writestr("%(n)s-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("%(n)s-1.0.dist-info/RECORD", "")
r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "-q", whl], capture_output=True, text=True)
print("pip", r.returncode, r.stderr[-300:])
''' % {"n": name}
    else:  # Debian's: the user site directory appears, as a first pip install --user makes it
        code = r'''
import os, site
os.makedirs(site.getusersitepackages(), exist_ok=True)
with open(os.path.join(site.getusersitepackages(), "%(n)s.py"), "w") as f:
    f.write("VALUE = 42\n")
print("user site", site.getusersitepackages())
''' % {"n": name}
    r = h.execute(kc, code, timeout=120)
    return r["stdout"] + r["stderr"]


def stale():
    name = "tfgpu_e2e_pkg_%d" % os.getpid()
    if sys.prefix == sys.base_prefix:
        # The kernel's own user site, not the host's (the suite turns user
        # sites off: PYTHONNOUSERSITE).
        os.environ["PYTHONUSERBASE"] = os.path.join(h.TMP, "userbase")
        os.environ.pop("PYTHONNOUSERSITE", None)
    km, kc = h.start_kernel()
    sp = wait_spare(km)
    said = install_package(kc, name)
    h.note(install=said[-300:])
    h.check("pip 0" in said or "user site" in said, "the install failed: %s" % said)
    kc, took = restart(km, kc)
    new = h.kernel_pid(kc)
    r = h.execute(kc, "import %s; print(%s.VALUE)" % (name, name))
    h.note(restart_s=took, new_kernel=new, spare=sp["pid"], import_stdout=r["stdout"], import_error=r["reply"] and r["reply"].get("evalue"))
    h.check(new != sp["pid"], "the stale spare %d became the kernel" % sp["pid"])
    h.check(r["stdout"].strip() == "42", "the package installed before the restart does not import: %s" % r["reply"])
    left = h.wait_dead([sp["pid"]], 2.0)
    h.check(not left, "the stale spare is still alive: %s" % h.describe(left))
    with open(km.e2e_log, errors="replace") as f:
        log = f.read()
    h.check("changed since it imported" in log, "the supervisor's log does not say why the spare was not used")
    km.shutdown_kernel()
    if sys.prefix != sys.base_prefix:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", name], capture_output=True)


def off():
    os.environ["TFGPU_SPARE"] = "0"
    km, kc = h.start_kernel()
    time.sleep(3)  # a spare would be importing by now
    sup = h.supervisor_pid(km)
    standbys = [p for p in h.descendants(sup) if h.is_standby(p)]
    h.check(not standbys, "TFGPU_SPARE=0, and yet standbys run: %s" % h.describe(standbys))
    kc, took = restart(km, kc)
    new = h.kernel_pid(kc)
    h.note(restart_s=took)
    h.check(ppid(new) == km.provisioner.pid, "TFGPU_SPARE=0: the kernel's parent is %d, not the process jupyter_client started" % ppid(new))
    km.shutdown_kernel()


def preload_dir(body):
    d = os.path.join(h.TMP, "preload")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tfgpu_e2e_preload.py"), "w") as f:
        f.write("import os, time\nIMPORTED_AT = time.time()\nIMPORTED_BY = os.getpid()\n" + body)
    os.environ["PYTHONPATH"] = d + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    os.environ["TFGPU_PRELOAD"] = "json.tool,tfgpu_e2e_preload"


def preload():
    preload_dir("")
    km, kc = h.start_kernel()
    sp = wait_spare(km)
    h.check(sp.get("preload") == ["json.tool", "tfgpu_e2e_preload"], "the spare's record says preload %s" % sp.get("preload"))
    t0 = time.time()
    kc, took = restart(km, kc)
    r = h.execute(kc, "import sys\nprint('tfgpu_e2e_preload' in sys.modules, 'json.tool' in sys.modules)\n"
                      "import tfgpu_e2e_preload as m\nprint(m.IMPORTED_AT, m.IMPORTED_BY, __import__('os').getpid())")
    lines = r["stdout"].split()
    h.note(restart_s=took, cell=r["stdout"])
    h.check(lines[:2] == ["True", "True"], "the preloaded modules are not imported in the kernel: %s" % r["stdout"])
    h.check(float(lines[2]) < t0 and int(lines[3]) == int(lines[4]) == sp["pid"],
            "the module was not imported by the spare before the restart: %s (restart at %s, spare %d)" % (r["stdout"], t0, sp["pid"]))
    km.shutdown_kernel()


def age():
    os.environ["TFGPU_SPARE_MAX_AGE"] = "3s"
    km, kc = h.start_kernel()
    first = wait_spare(km)
    deadline = time.monotonic() + 60
    while True:
        sp = wait_spare(km)
        if sp["pid"] != first["pid"]:
            break
        h.check(time.monotonic() < deadline, "the spare %d was not replaced within 60 s" % first["pid"])
        time.sleep(0.05)
    # At once, while the fresh spare is young.
    kc, took = restart(km, kc)
    new = h.kernel_pid(kc)
    left = h.wait_dead([first["pid"], first["standby_pid"]], 3.0)
    h.note(first=first["pid"], replaced_by=sp["pid"], new_kernel=new, restart_s=took)
    h.check(not left, "the replaced spare or its standby still runs: %s" % h.describe(left))
    h.check(new == sp["pid"], "the restart did not use the fresh spare %d: kernel %d" % (sp["pid"], new))
    km.shutdown_kernel()


def gpu():
    # The preloaded module holds device 0 as a CUDA context would.
    preload_dir("import holder\nholder.hold(0, 300)\n")
    km, kc = h.start_kernel()
    path = os.path.join(h.state_dir(), kernel_id(km) + ".spare")
    deadline = time.monotonic() + 60
    rec = None
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                rec = json.load(f)
            if rec.get("off"):
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    h.note(spare_record=rec)
    h.check(rec and rec.get("gpu") and "GPU" in rec.get("off", ""), "no record of the discarded spare: %s" % rec)
    row = ps_row(km)
    h.note(ps_spare=row and row.get("spare"))
    h.check(row and (row.get("spare") or {}).get("off"), "ps does not say why the kernel keeps no spare: %s" % (row and row.get("spare")))
    doc = doctor()
    h.check("no spare kernel for %s" % kernel_id(km)[:8] in doc, "doctor does not say why the kernel keeps no spare:\n%s" % doc)
    kc, took = restart(km, kc)
    new = h.kernel_pid(kc)
    h.check(ppid(new) == km.provisioner.pid, "the restart was not cold: the kernel's parent is %d" % ppid(new))
    time.sleep(3)  # a standby would have started, and its spare imported
    standbys = [p for p in h.descendants(km.provisioner.pid) if h.is_standby(p)]
    h.check(not standbys, "the next supervisor started a standby again: %s" % h.describe(standbys))
    with open(km.e2e_log, errors="replace") as f:
        log = f.read()
    n = log.count("holds a GPU context")
    h.note(restart_s=took, warnings=n)
    h.check(n == 1 and "tfgpu_e2e_preload" in log, "want one warning naming the modules, got %d" % n)
    km.shutdown_kernel()
    h.check(not os.path.exists(path), "the record of the spare's GPU context outlived the kernel's shutdown")


def kept():
    km, kc = h.start_kernel()
    for i in range(4):
        sp = wait_spare(km)
        km.restart_kernel()
        r = h.execute(kc, "import os; print('kept', os.getpid())", timeout=30)
        h.note(**{"kept_%d" % i: {"spare": sp["pid"], "status": r["status"], "stdout": r["stdout"], "idle": r["idle"]}})
        h.check(r["reply"] is not None and r["status"] == "ok", "restart %d: no execute_reply on the kept client: %s" % (i, r["status"]))
        h.check(r["idle"], "restart %d: the kept client never saw the cell's idle status (iopub lost)" % i)
        h.check(r["stdout"].strip() == "kept %d" % sp["pid"],
                "restart %d: the kept client got stdout %r, want the output of the spare kernel (pid %d)" % (i, r["stdout"], sp["pid"]))
    km.shutdown_kernel()


h.run({"adopt": adopt, "stale": stale, "off": off, "preload": preload, "age": age, "gpu": gpu, "kept": kept}[WHAT])
