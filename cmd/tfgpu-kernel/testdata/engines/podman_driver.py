"""Driver of the podman end-to-end test (e2e_podman_test.go), run inside
the container with the image's Python (Debian 12's: jupyter_client 7.4.9,
ipykernel 6.17) as the container's command: under podman's --init
(catatonit) or, for the variant "no-init", as PID 1 itself, which never
reaps an orphan.

    podman_driver.py VARIANT     (default | memory | readonly-cgroups | privileged | no-init | rootless-memory)

E2E_ROOTLESS=1: podman runs as an ordinary user (rootless): uid 0 here must
be that user on the host, and a tfgpu kernel's containment must be proc.
E2E_KERNEL=python3 (E2E_WRAPPED=0): Debian's stock kernelspec, for
comparison; what only the supervisor does is noted
(FACTS["stock_differences"], harness.check), not asserted.

The test bind-mounts the tfgpu-kernel it built at /opt/tfgpu/tfgpu-kernel
(E2E_TFGPU_BIN) and testdata at /opt/tfgpu/testdata, read-only, and a
scratch directory of its own at E2E_TMP, where the kernels' logs go.

1. Installs the kernelspec inside the container with the real `install`
   (--prefix /tmp/k --python /usr/bin/python3), starts a kernel through
   jupyter_client's KernelManager, runs a cell that starts a setsid'd,
   double-forked, SIGTERM-ignoring daemon and a SIGTERM-ignoring child
   (harness.SPAWN_CHILDREN), restarts the kernel: both gone (waited for,
   harness.GONE_WAIT, the time noted), the new kernel answers. Then, by variant:
   - memory (podman run --memory 1g): a cell touching 1.5 GB is killed and
     its stderr names the container's memory limit of 1 GiB; the server's
     autorestart brings a fresh kernel;
   - memory also has TFGPU_MEMORY_LIMIT=300M: the first cell is told it is
     not applied, and that the container's 1 GiB holds the kernel;
   - readonly-cgroups (TFGPU_MEMORY_LIMIT=300M, podman's default read-only
     cgroup mounts): the first cell is told the 300 MiB limit is not applied;
   - rootless-memory (rootless, podman run --memory 1g, which podman ignores
     there, and TFGPU_MEMORY_LIMIT=300M): the first cell is told that no
     memory limit applies to this kernel;
   - no-init: after the restart a shutdown, then no zombie (state Z) in the
     container, as ps shows it; a new kernel for what follows.
   Prints "E2E-RESULT {json}" (harness.py's contract).
2. Starts the children again in the running kernel and prints
   "E2E-READY {json}" (the kernel ids, for the test to tell its cgroups),
   then waits to be stopped from the host (podman stop or podman kill).
"""

import json
import os
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))
import harness as h  # noqa: E402

VARIANT = sys.argv[1] if len(sys.argv) > 1 else "default"
ROOTLESS = os.environ.get("E2E_ROOTLESS") == "1"
# The memory controller is a v1 hierarchy here: a rootless container then
# has no cgroup of its own, and podman ignores --memory (issue 36).
MEMORY_V1 = os.path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")
# What a rootless container on cgroup v1 is told, in the first cell and
# by doctor: no memory limit, and nothing podman can do about it.
ROOTLESS_V1_NO_LIMIT = ("no memory limit applies to this kernel", "none of podman's options can give it one",
                        "only the host's admin can")
BIN = os.environ.get("E2E_TFGPU_BIN", "/opt/tfgpu/tfgpu-kernel")
PREFIX = "/tmp/k"

KMS = []  # every kernel manager started, for the kernel ids


def install():
    out = subprocess.run([BIN, "install", "--prefix", PREFIX, "--python", "/usr/bin/python3"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert out.returncode == 0, "%s install --prefix %s: exit %d: %s" % (BIN, PREFIX, out.returncode, out.stdout)
    os.environ["JUPYTER_PATH"] = os.path.join(PREFIX, "share", "jupyter")
    with open(os.path.join(PREFIX, "share", "jupyter", "kernels", "tfgpu", "kernel.json")) as f:
        argv = json.load(f)["argv"]
    assert argv[0] == BIN, "the kernelspec runs %s, not %s" % (argv[0], BIN)


def doctor_check():
    """tfgpu-kernel doctor inside the container names the engine, how its
    memory limit and the kernel relate, and the read-only mount as the
    cause of proc (#24), never advice for another cause."""
    out = subprocess.run([BIN, "doctor"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    h.note(doctor=out.splitlines())
    where = "inside a rootless podman container" if ROOTLESS else "inside a podman container"
    assert where in out, "doctor does not say %r: %s" % (where, out)
    if ROOTLESS and MEMORY_V1:
        # Fixes no one inside can make are not offered (#36): the host
        # admin's matter is said to be the host admin's.
        for want in ("a rootless container on cgroup v1 cannot make cgroups", "the host admin's matter") + ROOTLESS_V1_NO_LIMIT:
            assert want in out, "rootless doctor does not say %r:\n%s" % (want, out)
        for unwant in ("run as root", "systemd-logind", "--privileged", "run --memory 8g"):
            assert unwant not in out, "rootless doctor advises %r, which cannot help here:\n%s" % (unwant, out)
    want = {"memory": "the container's memory limit of 1 GiB",
            "readonly-cgroups": "is mounted read-only (a container's default)",
            "default": "the container has no memory limit"}.get(VARIANT) if not ROOTLESS else None
    if want:
        assert want in out, "doctor in variant %s does not say %r:\n%s" % (VARIANT, want, out)
    if VARIANT == "readonly-cgroups":
        assert "delegate a cgroup v2 subtree" not in out, "doctor advises delegation where the cause is the read-only mount:\n%s" % out


def cgroup_mounts():
    """{mount point: "ro" | "rw"} of the cgroup file systems the container sees."""
    out = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] in ("cgroup", "cgroup2"):
                out[fields[4]] = "ro" if "ro" in fields[5].split(",") else "rw"
    return out


def kernel_id(km):
    return os.path.basename(km.connection_file)[len("kernel-"):-len(".json")]


def start():
    km, kc = h.start_kernel()
    KMS.append(km)
    return km, kc


def restart_check(km, kc):
    """Children in the kernel, km.restart_kernel(): the children and the old
    kernel gone within 2 s of its return, the new kernel answers."""
    kids = h.spawn_children(kc)
    old = sorted(set(h.tree_of(km) + list(kids.values())))
    t0 = time.monotonic()
    km.restart_kernel()
    h.note(restart_s=round(time.monotonic() - t0, 3), restart_shutdown_status=h.shutdown_status(km))
    returned = time.monotonic()
    left = h.wait_dead(old, h.TREE_WAIT)
    h.note(restart_tree_gone_after_return_s=round(time.monotonic() - returned, 3),
           restart_survivors=h.describe(left), restart_children=kids)
    h.check(not left, "restart: processes of the old tree alive %d s after restart_kernel returned: %s" % (h.TREE_WAIT, h.describe(left)))
    kc.stop_channels()
    kc = h.connect(km)
    h.track(km.provisioner.pid, h.kernel_pid(kc))
    h.assert_answers(kc, "the new kernel after the restart")
    return kc


def memory_check(km, kc):
    r, rc, left = h.oom_cell(km, kc)
    h.note(oom_returncode=rc, oom_cell_stderr=r["stderr"][-800:], oom_cell_stdout=r["stdout"][-200:])
    assert "survived" not in r["stdout"], "the cell ran to the end: the container's limit did not hold"
    assert not left, "survivors of the OOM-killed kernel: %s" % h.describe(left)
    want = "the container's memory limit of 1 GiB"
    assert want in r["stderr"], "the killed cell's stderr does not name %r: %r" % (want, r["stderr"])
    kc = h.autorestart(km, kc, "killed at the container's memory limit")
    h.assert_answers(kc, "the kernel after the OOM kill and autorestart")
    return kc


def uid_map():
    """[(inside, outside, count)] of this process's user namespace."""
    with open("/proc/self/uid_map") as f:
        return [tuple(int(x) for x in l.split()) for l in f if l.strip()]


def containment_check(km):
    """A tfgpu kernel's containment, from its supervisor's record: proc
    where the cgroups cannot be written (rootless, or read-only)."""
    st = h.kernel_record(km)
    assert st, "no record of the kernel in %s" % h.state_dir()
    h.note(containment=st.get("containment"))
    if ROOTLESS:
        assert st.get("containment") == "proc", "rootless: containment %r, want proc" % st.get("containment")


def zombies():
    """ps -eo pid,stat,comm's lines of processes in state Z."""
    out = subprocess.run(["ps", "-eo", "pid,stat,comm"], stdout=subprocess.PIPE, text=True).stdout
    h.note(ps_after_shutdown=out.splitlines())
    return [l.strip() for l in out.splitlines()[1:] if l.split()[1].startswith("Z")]


def checks():
    mounts = cgroup_mounts()
    h.note(variant=VARIANT, rootless=ROOTLESS, pid=os.getpid(), cgroup_mounts=mounts, uid_map=uid_map())
    if ROOTLESS:
        assert any(i == 0 and o != 0 for i, o, _ in uid_map()), "rootless, but uid 0 here is root on the host: %s" % uid_map()
    if VARIANT in ("readonly-cgroups", "privileged"):
        want = "rw" if VARIANT == "privileged" else "ro"
        assert mounts and all(m == want for m in mounts.values()), \
            "variant %s wants every cgroup file system mounted %s; the container has %s" % (VARIANT, want, mounts)
    install()
    doctor_check()
    if VARIANT == "readonly-cgroups":
        os.environ["TFGPU_MEMORY_LIMIT"] = "300M"
    km, kc = start()
    first = h.ok(h.execute(kc, "6*7"), "the first cell")
    h.note(first_cell_stderr=first["stderr"][-800:])
    if h.WRAPPED:
        containment_check(km)
    if VARIANT == "readonly-cgroups":
        want = "memory limit of 300 MiB is not applied"
        assert want in first["stderr"], "the first cell's stderr does not say %r: %r" % (want, first["stderr"])
    if VARIANT == "memory":  # TFGPU_MEMORY_LIMIT=300M under podman run --memory 1g
        for want in ("the memory limit of 300 MiB is not applied inside a podman container", "the container's memory limit of 1 GiB"):
            assert want in first["stderr"], "the first cell's stderr does not say %r: %r" % (want, first["stderr"])
    if VARIANT == "rootless-memory":  # TFGPU_MEMORY_LIMIT=300M under podman run --memory 1g, ignored
        want = ("the memory limit of 300 MiB is not applied inside a rootless podman container",)
        if MEMORY_V1:
            want += ROOTLESS_V1_NO_LIMIT
        for w in want:
            assert w in first["stderr"], "the first cell's stderr does not say %r: %r" % (w, first["stderr"])
        assert "--memory 8g" not in first["stderr"], "the first cell is told to use podman --memory, ignored here: %r" % first["stderr"]
    kc = restart_check(km, kc)
    if VARIANT == "memory":
        kc = memory_check(km, kc)
    if VARIANT == "no-init":
        tree = h.tree_of(km)
        km.shutdown_kernel()
        kc.stop_channels()
        h.note(shutdown_status=h.shutdown_status(km))
        returned = time.monotonic()
        left = h.wait_dead(tree, h.GONE_WAIT)
        h.note(shutdown_tree_gone_after_return_s=round(time.monotonic() - returned, 3))
        assert not left, "shutdown: alive %d s after shutdown_kernel returned: %s" % (h.GONE_WAIT, h.describe(left))
        # Every process of the tree is dead now (a zombie counts): one left a
        # zombie is there already, and for good (PID 1 here never reaps);
        # waited for, so that one its parent is about to reap passes.
        z, _ = h.wait_gone(zombies, interval=0.1)
        assert not z, "zombies in the container after a start, a restart and a shutdown, with PID 1 not reaping: %s" % z
        km, kc = start()
    return km, kc


def main():
    res = {"ok": False, "error": ""}
    km = kc = None
    try:
        km, kc = checks()
        res["ok"] = True
    except BaseException as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
        h.log(traceback.format_exc())
        h._log_tails()
    res["pids"], res["facts"] = h.PIDS, h.FACTS
    print("E2E-RESULT " + json.dumps(res, default=str), flush=True)

    # The tree the host stops: a kernel with its children running.
    ready = {"kernel_ids": []}
    try:
        if km is None or not km.is_alive():
            km, kc = start()
        ready["children"] = h.spawn_children(kc)
        ready["supervisor"] = km.provisioner.pid
    except BaseException as e:
        ready["error"] = "%s: %s" % (type(e).__name__, e)
        h.log(traceback.format_exc())
    ready["kernel_ids"] = [kernel_id(k) for k in KMS]
    print("E2E-READY " + json.dumps(ready), flush=True)
    while True:
        time.sleep(3600)


main()
