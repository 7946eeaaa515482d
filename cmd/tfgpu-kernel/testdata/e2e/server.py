"""The scenario users meet (issue 5): the real Jupyter server, and nbconvert.

Debian's jupyter-notebook 6.4.12 and nbconvert 6.5 start the installed
"tfgpu" kernelspec themselves, as they do for a user who picked "TF-GPU
(clean restart)"; the fake NVML of TestE2EGPU stands in for the GPU
(LD_LIBRARY_PATH, FAKE_NVML_*, holder.py on PYTHONPATH, all inherited by
the server and so by every supervisor it starts), and TFGPU_STATE_DIR is a
directory of this run, so `tfgpu-kernel ps` sees exactly this run's kernels.

argv[1] picks the scenario:

  rest       A notebook server on 127.0.0.1 with a random token, driven with
             curl over its REST API the way JupyterLab drives it:
             POST /api/kernels {"name": "tfgpu"} starts a kernel; through its
             connection file (kernel-<id>.json in the server's runtime dir) a
             cell holds 1 GiB of GPU0 and starts a setsid'd holder of 512 MiB
             on GPU1. `tfgpu-kernel ps --json` has a row with the server's
             kernel id, the kernel's and the holder's pids and both devices'
             bytes. The driver takes 1.5 s to release a dead holder
             (FAKE_NVML_RELEASE_MS).
             POST /api/kernels/<id>/restart: when it returns no process of
             the old tree is alive; when the new kernel answers, NVML lists
             none of the old tree's pids (so it cannot have answered before
             the 1.5 s release), ps shows the new tree only, and the first
             cell is not warned that memory is still held.
             The cell again, then DELETE /api/kernels/<id>: when it returns no
             process of the tree is alive; NVML lists none of its pids and ps
             has no row for it (each polled, bounded).
             POST /api/shutdown stops the server, which exits 0. The server
             log (which carries the supervisors' stderr) has a "GPU memory
             released" line with both devices' figures for the restart and
             for the shutdown, and no error.
  usage      (jupyter_server 2 with jupyter-resource-usage, current stack)
             A kernel whose cell holds 1 GiB of GPU0, starts a setsid'd
             holder of 512 MiB on GPU1 and a setsid'd worker touching
             200 MiB of memory. GET /api/metrics/v1/kernel_usage/get_usage/<id>,
             the "Kernel usage" panel's question (usage_request on control),
             returns: the kernel's own fields (pid, hostname, cpu_count,
             host_virtual_memory), the whole tree's kernel_memory (with the
             escaped worker's 200 MiB, which ipykernel cannot see) and
             processes, its GPU memory in total and per device, and the
             panel's host_usage_flag.
  nbconvert  `python3 -m nbconvert --to notebook --execute tfgpu_smoke.ipynb`
             (the notebook names the tfgpu kernelspec in its metadata): exit
             0; the executed cells show the kernel supervised by
             `tfgpu-kernel run`, the computed result, and the pid of a
             `sleep` the notebook started in a session of its own; when
             nbconvert has exited, the kernel, its supervisor and that sleep
             are gone and ps has no row.

  park       `tfgpu-kernel stop ID` on a kernel the server started (its
             restarter on, as in every Jupyter server): the tree is killed and
             NVML clear, but the supervisor stays, so ps shows the kernel
             parked, the server still lists it, and 7 s later (two restarter
             polls) the same supervisor runs and the server log has no
             restart. The next cell runs in a fresh kernel and is told why.
             `stop --hold --message` keeps it down: a cell is refused with the
             message, no kernel starts; `tfgpu-kernel start ID` lifts it.
  parknb     nbclient (`nbconvert --execute --allow-errors`) of a notebook
             whose second cell has its own kernel stopped while it runs:
             that cell ends (an error reply) saying so, nbclient goes on (no
             DeadKernelError), the third cell runs in a fresh kernel and
             is told, and nbclient exits 0.

With a stock kernelspec (E2E_KERNEL=python3, E2E_WRAPPED=0) only nbconvert
runs; what only the supervisor promises is reported, not asserted.
"""

import json
import os
import signal
import subprocess
import sys
import time

import harness as h
import nvmlcheck
import server_helpers as sh

SCENARIO = sys.argv[1] if len(sys.argv) > 1 else "rest"  # rest, usage, nbconvert, papermill
HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ["E2E_TFGPU_BIN"]
RELEASE_S = 1.5

# Inherited by the server, nbconvert and every supervisor they start; the
# fake NVML reads its knobs when this process first initialises it, too.
os.environ["TFGPU_STATE_DIR"] = os.path.join(h.TMP, "state")
os.environ["FAKE_NVML_RELEASE_MS"] = str(int(RELEASE_S * 1000))

HOLD = sh.HOLD


def hold(kc, what):
    r = h.ok(h.execute(kc, HOLD, timeout=60), what)
    return sh.hold_pids(r["stdout"], what), r


# ------------------------------------------------------------ rest


def rest():
    # On the current stack the server runs as a careful admin of a shared box
    # would run it: kernels' traffic encrypted (the supervisor speaks CURVE).
    srv = sh.NotebookServer(os.path.join(h.TMP, "server"), transport_encryption="required" if sh.CURRENT else None)
    srv.start()
    try:
        kernel_lifecycle(srv)
    except BaseException:
        srv.stop()
        h.log("---- tail of the server log (with the supervisors' stderr) ----\n" + srv.log()[-6000:])
        raise
    how = srv.stop()
    log = srv.log()
    # The 404s of the scenario's own GET after DELETE are expected.
    warnings = [l for l in log.splitlines() if (l.startswith(("[W", "[E", "[C")) or "level=WARN" in l or "level=ERROR" in l)
                and not ("404 GET /api/kernels/" in l or "Kernel does not exist" in l)]
    h.note(server_stopped_by=how, server_exit=srv.proc.returncode, server_log_warnings=warnings)
    assert how == "api" and srv.proc.returncode == 0, "the server did not exit 0 on /api/shutdown: %s, exit %s" % (how, srv.proc.returncode)

    released = [l for l in log.splitlines() if "GPU memory released" in l]
    h.note(released_lines=released)
    for event in ("restart", "shutdown"):
        lines = [l for l in released if "event=%s " % event in l]
        assert lines and 'released="GPU0 1 GiB, GPU1 512 MiB"' in lines[-1] and "by=pid" in lines[-1], (
            "the server log has no 'GPU memory released' line for the %s with both devices' figures: %s" % (event, released))
    bad = [l for l in log.splitlines() if "level=ERROR" in l or "Traceback" in l or l.startswith("[E")]
    assert not bad, "errors in the server log: %s" % bad


def kernel_lifecycle(srv):
    code, model = srv.curl("POST", "/api/kernels", {"name": h.KERNEL})
    assert code == 201 and model["name"] == h.KERNEL, "POST /api/kernels: %s %s" % (code, model)
    kid = model["id"]
    conn = srv.connection_file(kid)
    assert os.path.exists(conn), "no connection file %s" % conn
    h.note(kernel_id=kid)
    with open(conn) as f:
        keys = "curve_publickey" in json.load(f)
    h.note(transport_encryption=keys)
    assert keys == bool(srv.transport_encryption), "CURVE keys in the connection file: %s, want %s" % (
        keys, bool(srv.transport_encryption))

    sh.wait_kernel_info(conn)
    kc = h.client_for(conn)
    first, _ = hold(kc, "holding cell")
    sup, old = sh.tree(srv, first["kernel"], "first kernel")
    old |= set(first.values())
    seen = sh.listed_pids()
    assert set(first.values()) <= seen, "NVML lists %s, want the kernel and the escapee %s" % (sorted(seen), first)
    sh.check_ps(BIN, kid, sup, first.values(), "before_restart")
    h.note(old_tree=h.describe(sorted(old)))

    # Restart as the notebook UI does it. notebook 6.4.12 answers the POST
    # once the new supervisor is started, before the kernel is ready (its
    # kernel_info future is not awaited, and the REST execution_state still
    # says the old kernel's "idle"): readiness is a client's kernel_info.
    kc.stop_channels()
    watch = nvmlcheck.DriverRelease(RELEASE_S * 1000)
    t0 = time.monotonic()
    _, model = srv.curl("POST", "/api/kernels/%s/restart" % kid, timeout=120)
    returned = time.monotonic() - t0
    alive = h.survivors(old)
    sh.wait_kernel_info(conn)
    ready, ready_at = time.monotonic() - t0, time.time()
    kc = h.client_for(conn)
    listed = sh.listed_pids() & old
    released_at = watch.released_at()
    h.note(restart_returned_s=round(returned, 3), restart_to_ready_s=round(ready, 3),
           restart_model_state=model.get("execution_state"), stamped=sorted(watch.stamps),
           ready_after_release_s=None if released_at is None else round(ready_at - released_at, 3))
    assert not alive, "processes of the old tree alive when the restart returned: %s" % h.describe(alive)
    assert not listed, "when the new kernel answered, NVML still listed the old tree: %s" % sorted(listed)
    # The order, not a time: the new kernel answered after the driver
    # released the old tree's memory (the fake's release stamps).
    assert released_at is not None, "the driver never saw a holder of the old tree go"
    assert ready_at >= released_at, "the new kernel answered %.2f s before the driver released the old tree's memory (%.1f s release)" % (
        released_at - ready_at, RELEASE_S)
    idle, waited = sh.poll(lambda: srv.curl("GET", "/api/kernels/" + kid)[1]["execution_state"] == "idle", 30, 0.2)
    h.note(rest_idle_after_ready_s=round(waited, 3))
    assert idle, "GET /api/kernels/%s never said idle after the restart" % kid

    second, r = hold(kc, "holding cell after the restart")
    assert "still held" not in r["stderr"], "the first cell after the restart was warned: %r" % r["stderr"]
    assert second["kernel"] not in old, "the kernel after the restart is the old one (%d)" % second["kernel"]
    sup2, tree2 = sh.tree(srv, second["kernel"], "kernel after the restart")
    tree2 |= set(second.values())
    sh.check_ps(BIN, kid, sup2, second.values(), "after_restart", old=old)
    h.note(deleted_tree=h.describe(sorted(tree2)))

    # Shutdown, as closing the notebook's kernel does it.
    kc.stop_channels()
    t0 = time.monotonic()
    code, _ = srv.curl("DELETE", "/api/kernels/" + kid, timeout=120)
    returned = time.monotonic() - t0
    alive = h.survivors(tree2)
    _, nvml_s = sh.poll(lambda: not sh.listed_pids() & tree2, h.GONE_WAIT, 0.1)
    listed = sh.listed_pids() & tree2
    _, ps_s = sh.poll(lambda: sh.ps_row(BIN, kid) is None, h.GONE_WAIT, 0.1)
    row = sh.ps_row(BIN, kid)
    h.note(delete_returned_s=round(returned, 3), delete_nvml_clear_after_s=round(nvml_s, 3),
           delete_ps_clear_after_s=round(ps_s, 3))
    assert code == 204, "DELETE /api/kernels/%s: HTTP %s" % (kid, code)
    assert not alive, "processes of the tree alive when DELETE returned: %s" % h.describe(alive)
    assert not listed, "%d s after DELETE NVML still lists the tree: %s" % (h.GONE_WAIT, sorted(listed))
    assert row is None, "%d s after DELETE ps --json still has a row for the kernel: %s" % (h.GONE_WAIT, row)
    code, _ = srv.curl("GET", "/api/kernels/" + kid, check=False)
    assert code == 404, "GET /api/kernels/%s after DELETE: HTTP %s" % (kid, code)


# ------------------------------------------------------------ usage

WORKER = r'''
import os, subprocess, sys, json
r, w = os.pipe()
code = "import os, sys, time; b = b'x' * (200 << 20); os.write(int(sys.argv[1]), b'1'); time.sleep(600)"
p = subprocess.Popen([sys.executable, "-c", code, str(w)], pass_fds=(w,), start_new_session=True)
os.close(w); os.read(r, 1)
print("E2E-WORKER %d" % p.pid)
'''


def usage():
    srv = sh.NotebookServer(os.path.join(h.TMP, "server"))
    srv.start()
    try:
        code, model = srv.curl("POST", "/api/kernels", {"name": h.KERNEL})
        kid = model["id"]
        conn = srv.connection_file(kid)
        sh.wait_kernel_info(conn)
        kc = h.client_for(conn)
        held, _ = hold(kc, "holding cell")
        r = h.ok(h.execute(kc, WORKER, timeout=60), "escaped worker")
        worker = int([l for l in r["stdout"].splitlines() if l.startswith("E2E-WORKER ")][0].split()[1])
        h.track(worker)
        path = "/api/metrics/v1/kernel_usage/get_usage/" + kid
        _, first = srv.curl("GET", path)
        time.sleep(1)
        _, body = srv.curl("GET", path)
        c = body["content"]
        h.note(usage_reply=c)
        for k in ("hostname", "pid", "cpu_count", "host_virtual_memory", "host_usage_flag"):
            h.check(k in c, "usage_reply lacks %s: %s" % (k, sorted(c)))
        h.check(c["pid"] == held["kernel"], "usage_reply pid %s, the kernel is %d" % (c.get("pid"), held["kernel"]))
        h.check(c.get("kernel_processes", 0) >= 3, "usage_reply counts %s processes; the tree has the kernel, the holder and the worker" %
                c.get("kernel_processes"))
        h.check(c.get("kernel_memory", 0) >= (200 << 20) + (30 << 20),
                "usage_reply kernel_memory %s lacks the escaped worker's 200 MiB" % c.get("kernel_memory"))
        h.check(isinstance(c.get("kernel_cpu"), (int, float)), "usage_reply kernel_cpu %r" % c.get("kernel_cpu"))
        h.check(c.get("gpu_memory") == sum(sh.WANT_GPU.values()), "usage_reply gpu_memory %s, want %d" % (
            c.get("gpu_memory"), sum(sh.WANT_GPU.values())))
        per = {g["index"]: g["used_bytes"] for g in c.get("gpus", [])}
        h.check(per == sh.WANT_GPU, "usage_reply gpus %s, want %s" % (c.get("gpus"), sh.WANT_GPU))
        h.check(all(g.get("uuid", "").startswith("GPU-") and g.get("total_bytes", 0) > 0 for g in c.get("gpus", [])),
                "usage_reply gpus lack uuid or total: %s" % c.get("gpus"))
        kc.stop_channels()
        srv.curl("DELETE", "/api/kernels/" + kid, timeout=120)
        h.check(not h.wait_dead([worker, held["escapee"]], 5), "the escaped worker or holder survived the shutdown")
    except BaseException:
        srv.stop()
        h.log("---- tail of the server log (with the supervisors' stderr) ----\n" + srv.log()[-6000:])
        raise
    srv.stop()


# ------------------------------------------------------------ nbconvert


def nbconvert():
    """`nbconvert --execute` (nbclient underneath) of the notebook."""
    def argv(src, out_dir):
        a = [h.PY, "-m", "nbconvert", "--to", "notebook", "--execute", "--output-dir", out_dir, "--output", "out",
             "--ExecutePreprocessor.timeout=120", src]
        if not h.WRAPPED:  # the stock comparison: the same notebook on that kernelspec
            a.insert(-1, "--ExecutePreprocessor.kernel_name=" + h.KERNEL)
        return a
    run_notebook("nbconvert", argv)


def papermill():
    """papermill runs the notebook on the kernelspec its metadata names, as
    scheduled notebook jobs do."""
    def argv(src, out_dir):
        a = [h.PY, "-m", "papermill", "--execution-timeout", "120", src, os.path.join(out_dir, "out.ipynb")]
        if not h.WRAPPED:
            a[3:3] = ["-k", h.KERNEL]
        return a
    run_notebook("papermill", argv)


def run_notebook(tool, make_argv):
    """Runs tfgpu_smoke.ipynb with tool (make_argv(src, out_dir) is its
    command line, writing out_dir/out.ipynb): exit 0, the outputs, and
    nothing of the kernel's tree left once the tool has exited."""
    src = os.path.join(HERE, "tfgpu_smoke.ipynb")
    out_dir = os.path.join(h.TMP, tool)
    os.makedirs(out_dir)
    argv = make_argv(src, out_dir)
    # Output to files, not pipes: a process the kernel leaves behind must not
    # keep this scenario waiting for EOF.
    logs = {n: os.path.join(out_dir, tool + "." + n) for n in ("stdout", "stderr")}
    with open(logs["stdout"], "wb") as out, open(logs["stderr"], "wb") as err:
        p = h.spawn_helper(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=out_dir)
    h.track(p.pid)
    t0 = time.monotonic()
    try:
        p.wait(150)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)
        raise AssertionError("%s still running after 150 s" % tool)
    took = time.monotonic() - t0
    with open(logs["stderr"], errors="replace") as f:
        stderr = f.read()
    h.note(**{tool + "_s": round(took, 3), tool + "_exit": p.returncode,
              tool + "_warnings": [l for l in stderr.splitlines() if "level=WARN" in l or "level=ERROR" in l or "Warning" in l]})
    assert p.returncode == 0, "%s exited %d:\n%s" % (tool, p.returncode, stderr[-4000:])

    with open(os.path.join(out_dir, "out.ipynb")) as f:
        nb = json.load(f)
    assert nb["metadata"]["kernelspec"]["name"] == "tfgpu", nb["metadata"]["kernelspec"]
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    outputs = [c.get("outputs", []) for c in cells]
    h.note(outputs=outputs)
    errors = [o for out in outputs for o in out if o["output_type"] == "error"]
    assert not errors, "error outputs: %s" % errors

    def stdout(i):
        return "".join("".join(o["text"]) for o in outputs[i] if o["output_type"] == "stream" and o["name"] == "stdout")

    who = dict(l.split(": ", 1) for l in stdout(0).splitlines() if ": " in l)
    kernel, sup = int(who["kernel pid"]), int(who["parent pid"])
    daemon = int(stdout(2).split(": ")[-1])
    pids = [sup, kernel, daemon]
    h.track(*pids)
    result = [o for o in outputs[1] if o["output_type"] == "execute_result"]
    assert result and "".join(result[0]["data"]["text/plain"]) == "332833500", "the sum cell gave %s" % outputs[1]
    h.check(who["parent"] == "tfgpu-kernel run", "the kernel ran under %r, not the tfgpu-kernel supervisor" % who["parent"])

    alive = h.survivors(pids)
    later = h.wait_dead(pids, h.TREE_WAIT)
    h.note(survivors_on_exit=h.describe(alive), survivors_left=h.describe(later))
    h.check(not alive, "processes alive when %s exited: %s" % (tool, h.describe(alive)))
    h.check(not later, "processes alive %d s after %s exited: %s" % (h.TREE_WAIT, tool, h.describe(later)))
    h.check(sh.ps_json(BIN) == [], "ps --json lists kernels after %s exited: %s" % (tool, sh.ps_json(BIN)))
    for pid in later:  # what a stock kernel leaves must not leak into later tests
        os.kill(pid, signal.SIGKILL)
    assert "level=ERROR" not in stderr, "errors in %s's stderr:\n%s" % (tool, stderr[-4000:])


# ------------------------------------------------------------ park


def run_bin(*args):
    out = subprocess.run([BIN] + list(args), capture_output=True, text=True, timeout=60)
    h.log("tfgpu-kernel %s: exit %d\n%s%s" % (" ".join(args), out.returncode, out.stdout, out.stderr))
    return out


def park():
    srv = sh.NotebookServer(os.path.join(h.TMP, "server"))
    srv.start()
    try:
        park_lifecycle(srv)
    except BaseException:
        srv.stop()
        h.log("---- tail of the server log (with the supervisors' stderr) ----\n" + srv.log()[-6000:])
        raise
    how = srv.stop()
    assert how == "api" and srv.proc.returncode == 0, "the server did not exit 0 on /api/shutdown: %s, exit %s" % (how, srv.proc.returncode)


def park_lifecycle(srv):
    code, model = srv.curl("POST", "/api/kernels", {"name": h.KERNEL})
    assert code == 201, "POST /api/kernels: %s %s" % (code, model)
    kid = model["id"]
    conn = srv.connection_file(kid)
    sh.wait_kernel_info(conn)
    kc = h.client_for(conn)
    pids, _ = hold(kc, "holding cell")
    sup, old = sh.tree(srv, pids["kernel"], "before the stop")
    old.discard(sup)
    old = {p for p in old if BIN not in h.cmdline(p)}  # the watcher stays with its supervisor

    out = run_bin("stop", kid)
    h.note(stop=out.stdout.splitlines())
    assert out.returncode == 0 and "parked by its supervisor" in out.stdout, "stop %s: %r %r" % (kid, out.stdout, out.stderr)
    assert "GPU memory released: GPU0 1 GiB, GPU1 512 MiB" in out.stdout, "stop does not say what it released: %r" % out.stdout
    h.check(not h.wait_dead(list(old), 2.0), "processes of the tree alive after stop: %s" % h.describe(h.survivors(old)))
    h.check(not (sh.listed_pids() & old), "NVML still lists the stopped tree")
    time.sleep(7)  # two polls of the server's restarter (every 3 s)
    h.check(h.alive(sup), "the supervisor ended after stop: the server would restart the kernel")
    row = sh.ps_row(BIN, kid)
    h.check(row and row["state"] == "parked" and row["supervisor_pid"] == sup and not row["pids"]
            and row["parked"]["by"] == "root" and row["parked"]["gpu_released"] == "GPU0 1 GiB, GPU1 512 MiB",
            "ps does not show the kernel parked under the same supervisor: %s" % row)
    code, model = srv.curl("GET", "/api/kernels/" + kid, check=False)
    h.note(kernel_model_parked=model)
    h.check(code == 200 and model.get("execution_state") not in ("dead", "restarting"), "the server sees the parked kernel %s: %s" % (code, model))
    restarts = [l for l in srv.log().splitlines() if "restarting kernel" in l.lower() or "AsyncIOLoopKernelRestarter" in l]
    h.check(not restarts, "the server restarted the parked kernel: %s" % restarts)

    first = h.ok(h.execute(kc, "import os; print(os.getpid())", timeout=60), "the first cell after stop")
    fresh = int(first["stdout"].strip())
    h.track(fresh)
    h.note(first_cell_after_stop=first["stderr"])
    h.check(fresh not in old and sh.ppid(fresh) == sup, "the first cell did not run in a fresh kernel of the same supervisor")
    for want in ("tfgpu-kernel: the kernel was stopped by root", "GPU memory released: GPU0 1 GiB, GPU1 512 MiB (NVML confirmed)",
                 "This is a fresh kernel."):
        h.check(want in first["stderr"], "the first cell after stop was not told %r: %r" % (want, first["stderr"]))

    out = run_bin("stop", "--hold", "--message", "GPU maintenance until 15:00", kid)
    h.check(out.returncode == 0 and "held down until started again" in out.stdout, "stop --hold: %r %r" % (out.stdout, out.stderr))
    h.check(not h.wait_dead([fresh], 2.0), "the fresh kernel alive after stop --hold")
    refused = h.execute(kc, "print('must not run')", timeout=30)
    h.note(held_cell=refused["stderr"])
    h.check(refused["status"] == "error" and refused["reply"].get("ename") == "KernelHeld", "the held cell: %s" % refused["reply"])
    h.check("held down by root" in refused["stderr"] and "GPU maintenance until 15:00" in refused["stderr"]
            and "must not run" not in refused["stdout"], "the held cell was told %r" % refused["stderr"])
    row = sh.ps_row(BIN, kid)
    h.check(row["state"] == "parked" and row["parked"]["hold"] and row["parked"]["message"] == "GPU maintenance until 15:00"
            and row["parked"]["by"] == "root", "ps --json of the held kernel: %s" % row)
    table = run_bin("ps").stdout
    h.check(any(kid[:8] in l and " held " in l for l in table.splitlines()), "ps does not show the kernel held:\n%s" % table)
    out = run_bin("start", kid)
    h.check(out.returncode == 0 and "hold lifted" in out.stdout, "start %s: %r %r" % (kid, out.stdout, out.stderr))
    again = h.ok(h.execute(kc, "import os; print(os.getpid())", timeout=60), "the cell after start")
    h.track(int(again["stdout"].strip()))
    kc.stop_channels()
    srv.curl("DELETE", "/api/kernels/" + kid)
    h.check(not h.wait_dead([sup, int(again["stdout"].strip())], 10), "the supervisor or its kernel alive after DELETE")


PARK_NB = {
    "cells": [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source":
         "import json, os, subprocess\n"
         "rows = json.loads(subprocess.run([os.environ['E2E_TFGPU_BIN'], 'ps', '--json'], capture_output=True, text=True).stdout)\n"
         "kid = [r['kernel_id'] for r in rows if r['supervisor_pid'] == int(os.environ['JPY_PARENT_PID'])][0]\n"
         "print('kernel pid:', os.getpid())"},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source":
         "import time\n"
         "subprocess.Popen([os.environ['E2E_TFGPU_BIN'], 'stop', kid], start_new_session=True)\n"
         "time.sleep(60)\n"
         "print('survived')"},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source":
         "import os\nprint('kernel pid:', os.getpid())"},
    ],
    "metadata": {"kernelspec": {"name": "tfgpu", "display_name": "TF-GPU (clean restart)", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def parknb():
    src = os.path.join(h.TMP, "park.ipynb")
    with open(src, "w") as f:
        json.dump(PARK_NB, f)
    out_dir = os.path.join(h.TMP, "parknb")
    os.makedirs(out_dir)
    argv = [h.PY, "-m", "nbconvert", "--to", "notebook", "--execute", "--allow-errors", "--output-dir", out_dir,
            "--output", "out", "--ExecutePreprocessor.timeout=120", src]
    logs = {n: os.path.join(out_dir, "nbconvert." + n) for n in ("stdout", "stderr")}
    with open(logs["stdout"], "wb") as o, open(logs["stderr"], "wb") as e:
        p = h.spawn_helper(argv, stdin=subprocess.DEVNULL, stdout=o, stderr=e, cwd=out_dir)
    h.track(p.pid)
    try:
        p.wait(150)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)
        raise AssertionError("nbconvert still running after 150 s")
    with open(logs["stderr"], errors="replace") as f:
        stderr = f.read()
    assert p.returncode == 0, "nbconvert exited %d:\n%s" % (p.returncode, stderr[-4000:])
    with open(os.path.join(out_dir, "out.ipynb")) as f:
        cells = [c for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    outputs = [c.get("outputs", []) for c in cells]
    h.note(outputs=outputs)

    def text(i, name):
        return "".join("".join(o["text"]) for o in outputs[i] if o["output_type"] == "stream" and o["name"] == name)
    h.check("the kernel was stopped by root" in text(1, "stderr") and "the next cell starts a fresh kernel" in text(1, "stderr")
            and "survived" not in text(1, "stdout"), "the stopped cell: %s" % outputs[1])
    h.check("DeadKernelError" not in stderr, "nbclient took the kernel for dead:\n%s" % stderr[-2000:])
    before, after = (int(text(i, "stdout").split(": ")[-1]) for i in (0, 2))
    h.track(before, after)
    h.check(after != before, "the third cell ran in the stopped kernel")
    h.check("This is a fresh kernel." not in text(2, "stderr"), "the third cell was told again: %r" % text(2, "stderr"))
    h.check(not h.wait_dead([before, after], 5), "kernels alive after nbconvert exited")


h.run({"rest": rest, "usage": usage, "nbconvert": nbconvert, "papermill": papermill, "park": park, "parknb": parknb}[SCENARIO])
