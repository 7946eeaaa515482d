"""JupyterLab 4 in a real browser (headless chromium, driven by
testdata/browser/lab.mjs with playwright-core), as a user meets the
kernel, on the current stack with the fake NVML:

  1. the launcher's "TF-GPU (clean restart)" notebook; a cell holds 1 GiB
     of GPU0 and starts a setsid'd holder of 512 MiB on GPU1;
     ps shows the tree, its GPU memory and the notebook open in the browser;
  2. Kernel → Restart Kernel… → Restart: once the status reads idle,
     nothing of the old tree is alive, NVML lists none of it, ps shows the
     new tree only; the cell runs again;
  3. the kernel process killed from outside (SIGKILL) while a cell runs:
     the cell shows why the kernel died, the server's restarter brings a
     fresh kernel, and nothing of the old tree is left;
  4. `tfgpu-kernel stop` from outside: the tree is killed and NVML clear,
     the supervisor stays (Lab shows the kernel idle, the server restarts
     nothing), and the next cell runs in a fresh kernel and says why;
     a cell that runs out of GPU memory (PyTorch-shaped) shows who holds
     the GPUs after its traceback; then Kernel → Shut Down Kernel: nothing
     of the tree alive, NVML clear, no ps row;
  5. (JupyterLab) a notebook on ipykernel's own kernel: no GPU status item;
  6. (JupyterLab) the README's picture, a notebook as a user writes it:
     train.ipynb starts a worker in a session of its own, then a native
     crash (SIGSEGV) kills the kernel; the cell says why and that the
     worker was killed with it, and it is gone; the next cell runs in the
     fresh kernel. JupyterLab is set not to
     ask about its news, so the screenshot shows only what a user sees;
  7. (JupyterLab) a notebook on a second kernelspec installed with
     --gpus auto, GPU0 held by another process: the first cell says the
     kernel got GPU1 and why, its CUDA_VISIBLE_DEVICES is GPU1's UUID, the
     status item's tooltip lists GPU1 only and says --gpus auto chose it.

The extension (labextension/, installed into the venv by the Go test)
is checked along the way: its status item reads what the fake NVML
holds for the tree (GPU 1.5 GiB: 1 GiB on GPU0, 512 MiB on GPU1, one
line per device in its tooltip), 0 MiB for a fresh kernel, hidden once
the kernel is shut down; after
Restart and after Shut Down a notification says what was released, per
device, and that NVML confirmed it; after the kernel's death too.

A screenshot of each step goes to E2E_ARTIFACTS (lab-readme.png is the
README's docs/img/lab-kernel-died.png; lab-gpu-status.png and
lab-gpu-released.png are docs/img's of the same names).
"""

import json
import os
import signal
import subprocess
import time

import harness as h
import server_helpers as sh

BIN = os.environ["E2E_TFGPU_BIN"]
ARTIFACTS = os.environ["E2E_ARTIFACTS"]
LAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "browser", "lab.mjs")

os.environ["TFGPU_STATE_DIR"] = os.path.join(h.TMP, "state")
os.environ["FAKE_NVML_RELEASE_MS"] = "1000"



# A cell as PyTorch raises its out-of-memory error (torch.OutOfMemoryError).
TORCH_OOM = """import types
torch = types.ModuleType("torch")
class OutOfMemoryError(RuntimeError):
    pass
OutOfMemoryError.__module__ = "torch"
raise OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 141.00 GiB")
"""


class Browser:
    def __init__(self):
        # Chromium keeps dconf in XDG_RUNTIME_DIR; that one is the
        # supervisors' (checked empty afterwards), so it gets its own.
        run = os.path.join(h.TMP, "chromium-run")
        os.makedirs(run, mode=0o700)
        env = dict(os.environ, XDG_RUNTIME_DIR=run)
        self.p = h.spawn_helper(["node", LAB, ARTIFACTS], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=open(os.path.join(ARTIFACTS, "browser.log"), "wb"), text=True)
        h.track(self.p.pid)

    def do(self, *cmd):
        self.p.stdin.write(" ".join(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, "the browser driver ended (see browser.log)"
        r = json.loads(line)
        assert r["ok"], "browser %s: %s (screenshot %s)" % (cmd[0], r.get("error"), r.get("screenshot"))
        return r

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
            self.p.wait(30)
        except Exception:
            self.p.kill()


def gib_mib(n):
    """Bytes as the extension writes them (labextension/src/format.ts)."""
    return "%.1f GiB" % (n / 2**30) if n >= 2**30 else "%d MiB" % round(n / 2**20)


HELD = sum(sh.WANT_GPU.values())
STATUS = "GPU " + gib_mib(HELD)  # GPU 1.5 GiB
RELEASED = ", ".join("GPU%d %s" % (d, gib_mib(n)) for d, n in sorted(sh.WANT_GPU.items()))


def check_status(b, want, what):
    """The extension's status item reads want; with the tree's figures, the
    bytes and the tooltip's line per device are NVML's too."""
    st = b.do("gpustatus", want) if want else b.do("gpustatus")
    h.note(**{what + "_gpu_status": st["text"]})
    if want == STATUS:
        assert st["bytes"] == str(HELD), "%s: status item bytes %s, the tree holds %d" % (what, st["bytes"], HELD)
        for d, n in sorted(sh.WANT_GPU.items()):
            assert any(l.startswith("GPU%d " % d) and (": %s of " % gib_mib(n)) in l for l in st["title"].splitlines()), \
                "%s: tooltip lacks GPU%d's %s: %r" % (what, d, gib_mib(n), st["title"])
    return st


def check_released(b, event, what):
    """A notification says what the event released, per device, NVML confirmed."""
    want = "GPU memory released after %s: %s (NVML confirmed)" % (event, RELEASED)
    got = b.do("notification", "GPU memory released after " + event)["text"]
    h.note(**{what + "_notification": got})
    assert got == want, "%s: the notification says %r, want %r" % (what, got, want)


def the_session(srv):
    _, sessions = srv.curl("GET", "/api/sessions")
    assert len(sessions) == 1, "sessions: %s" % sessions
    return sessions[0]


def check_gone(old, what, kid=None, within=0.0):
    """Nothing of old alive (within seconds: the UI does not say when the
    server has finished a shutdown), NVML lists none of it, and with kid,
    ps has no row for the kernel."""
    _, waited = sh.poll(lambda: not h.survivors(old), within, 0.05)
    alive = h.survivors(old)
    h.note(**{what + "_tree_gone_after_s": round(waited, 3)})
    assert not alive, "%s: processes of the old tree alive: %s" % (what, h.describe(alive))
    _, waited = sh.poll(lambda: not sh.listed_pids() & old, 10, 0.1)
    assert not sh.listed_pids() & old, "%s: NVML still lists %s" % (what, sorted(sh.listed_pids() & old))
    h.note(**{what + "_nvml_clear_after_s": round(waited, 3)})
    if kid is not None:
        _, _ = sh.poll(lambda: sh.ps_row(BIN, kid) is None, 10, 0.1)
        assert sh.ps_row(BIN, kid) is None, "%s: ps still has a row for %s" % (what, kid)


UI = os.environ.get("E2E_UI", "lab")  # "lab": JupyterLab 4; "notebook": Notebook 7


# The notebook of the README's picture: what a user writes, no test
# scaffolding. The worker stands for a data loader or a launcher's helper
# that left the kernel's process group; the crash for a native extension's.
README_NOTEBOOK = {
    "nbformat": 4, "nbformat_minor": 5,
    "metadata": {"kernelspec": {"name": "tfgpu", "display_name": "TF-GPU (clean restart)", "language": "python"},
                 "language_info": {"name": "python"}},
    "cells": [
        {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": "# Training run\nA data loader worker, then a crash in native code."},
        {"cell_type": "code", "id": "worker", "metadata": {}, "execution_count": None, "outputs": [], "source":
            "import os, subprocess\n"
            "# a data loader worker in a session of its own\n"
            "worker = subprocess.Popen([\"sleep\", \"3600\"], start_new_session=True)\n"
            "print(\"kernel\", os.getpid(), \"worker\", worker.pid)"},
        {"cell_type": "code", "id": "crash", "metadata": {}, "execution_count": None, "outputs": [], "source":
            "import ctypes\n"
            "ctypes.string_at(0)  # a bug in native code"},
        {"cell_type": "code", "id": "again", "metadata": {}, "execution_count": None, "outputs": [], "source":
            "import os\n"
            "print(\"a fresh kernel\", os.getpid())"},
    ],
}


def quiet_lab_settings():
    """JupyterLab asks, in a popup, whether to fetch Jupyter's news: the
    user settings say no, as a user who answered would have."""
    d = os.path.join(h.TMP, "lab-settings")
    p = os.path.join(d, "@jupyterlab", "apputils-extension")
    os.makedirs(p)
    with open(os.path.join(p, "notification.jupyterlab-settings"), "w") as f:
        json.dump({"fetchNews": "false", "checkForUpdates": False}, f)
    os.environ["JUPYTERLAB_SETTINGS_DIR"] = d


def main():
    if UI == "lab":
        quiet_lab_settings()
        install_auto_kernelspec()
    # JupyterLab's server encrypts its kernels' traffic (the supervisor speaks
    # CURVE), Notebook 7's does not: the same steps pass either way.
    srv = sh.NotebookServer(os.path.join(h.TMP, "server"), app={"lab": "jupyterlab", "notebook": "notebook"}[UI],
                            transport_encryption="required" if UI == "lab" else None)
    h.note(transport_encryption=srv.transport_encryption)
    srv.start()
    b = Browser()
    try:
        steps(srv, b)
    except BaseException:
        h.log("---- tail of the server log ----\n" + srv.log()[-6000:])
        raise
    finally:
        b.close()
        srv.stop()


def steps(srv, b):
    if UI == "lab":
        b.do("open", srv.url + "/lab?token=" + srv.token)
    else:
        b.do("opennb", srv.url + "/tree?token=" + srv.token)
    sess = the_session(srv)
    kid, nb_path = sess["kernel"]["id"], sess["path"]
    h.note(notebook=nb_path, kernel_id=kid)

    first = sh.hold_pids(b.do("run", json.dumps(sh.HOLD))["output"], "holding cell")
    sup, old = sh.tree(srv, first["kernel"], "first")
    old |= set(first.values())
    sh.check_ps(BIN, kid, sup, first.values(), "running", notebook=nb_path)
    check_status(b, STATUS, "running")
    b.do("shot", UI + "-1-running")
    b.do("shot", UI + "-gpu-status")

    t0 = time.monotonic()
    b.do("restart")
    h.note(restart_to_idle_s=round(time.monotonic() - t0, 3))
    check_gone(old, "restart")
    check_released(b, "Restart", "restart")
    b.do("shot", UI + "-gpu-released")
    check_status(b, "GPU 0 MiB", "fresh")
    second = sh.hold_pids(b.do("run", json.dumps(sh.HOLD))["output"], "cell after the restart")
    sup2, tree2 = sh.tree(srv, second["kernel"], "second")
    tree2 |= set(second.values())
    sh.check_ps(BIN, kid, sup2, second.values(), "after_restart", old=old, notebook=nb_path)
    check_status(b, STATUS, "after_restart")
    b.do("shot", UI + "-2-restarted")

    b.do("start", json.dumps("import time; time.sleep(600)"))
    time.sleep(1.0)
    os.kill(second["kernel"], signal.SIGKILL)
    died = b.do("waitoutput", "the kernel died")["output"]
    h.note(death_notice=died)
    assert "signal SIGKILL" in died and "Jupyter will start a fresh kernel" in died, "the cell says %r" % died
    b.do("shot", UI + "-3-died")
    dialog = b.do("dismiss")["dialog"]
    h.note(death_dialog=dialog)
    check_gone(tree2, "death")
    check_released(b, "the kernel died", "death")
    third = sh.hold_pids(b.do("run", json.dumps(sh.HOLD))["output"], "cell after the death")
    sup3, tree3 = sh.tree(srv, third["kernel"], "third")
    tree3 |= set(third.values())
    sh.check_ps(BIN, kid, sup3, third.values(), "after_death", old=old | tree2, notebook=nb_path)
    b.do("shot", UI + "-4-after-death")

    # Stopped by the operator: the kernel stays stopped (Lab shows it idle,
    # no dialog, the server's restarter does nothing), and the next cell
    # runs in a fresh kernel of the same supervisor and says why.
    out = subprocess.run([BIN, "stop", kid], capture_output=True, text=True, timeout=60)
    h.note(operator_stop=out.stdout.splitlines())
    assert out.returncode == 0 and "parked by its supervisor" in out.stdout, "stop %s: %r %r" % (kid, out.stdout, out.stderr)
    check_gone({p for p in tree3 if p != sup3 and BIN not in h.cmdline(p)}, "operator stop")
    time.sleep(4)  # a poll of the server's restarter (every 3 s) has come and gone
    assert h.alive(sup3), "the supervisor ended after stop: the server would restart the kernel"
    b.do("waitidle")
    # What the page sends by itself (the GPU item's usage polls, the
    # debugger's requests) starts no kernel: it stays stopped until a cell runs.
    row = sh.ps_row(BIN, kid)
    h.note(ps_parked={k: row.get(k) for k in ("state", "kernel_pid", "pids", "parked")})
    assert row["state"] == "parked" and not row["pids"], "the page's own traffic started a kernel after stop: %s" % row
    parked = b.do("run", json.dumps("import os; print('pid', os.getpid())"))["output"]
    h.note(first_cell_after_stop=parked)
    for want in ("the kernel was stopped by root", "GPU memory released: GPU0 1 GiB, GPU1 512 MiB (NVML confirmed)",
                 "This is a fresh kernel."):
        assert want in parked, "the first cell after the operator's stop does not say %r: %r" % (want, parked)
    fresh = int(parked.split("pid ")[-1].split()[0])
    h.track(fresh)
    assert fresh not in tree3 and sh.ppid(fresh) == sup3, "the cell after stop ran in %d, not a fresh kernel of %d" % (fresh, sup3)
    b.do("shot", UI + "-5-stopped")
    # The fresh kernel holds the GPU again, for the Shut Down's release.
    fourth = sh.hold_pids(b.do("run", json.dumps(sh.HOLD))["output"], "cell after the stop")
    tree3 = {*h.tree_below(sup3), *fourth.values()}
    # A GPU out-of-memory error, PyTorch-shaped: the cell's output area
    # shows, after the traceback, who holds the GPUs (here this kernel).
    oom = b.do("run", json.dumps(TORCH_OOM))["output"]
    h.note(**{UI + "_oom_output": oom[-1500:]})
    told = "PyTorch ran out of GPU memory. Who holds it now, largest first:"
    assert told in oom and oom.index(told) > oom.find("OutOfMemoryError") >= 0, \
        "the out-of-memory cell's output does not explain it after the error: %r" % oom
    for want in ("GPU0 Fake NVIDIA H200", "1 GiB      this kernel", "GPU1 Fake NVIDIA H200", "512 MiB    this kernel"):
        assert want in oom, "the explanation lacks %r: %r" % (want, oom)
    b.do("shot", UI + "-5b-gpu-oom")

    b.do("shutdown")
    check_gone(tree3 | {sup3}, "shutdown", kid, within=10)
    check_released(b, "Shut Down", "shutdown")
    check_status(b, "", "shut_down")  # no kernel: the item is hidden
    b.do("shot", UI + "-6-shut-down")
    if UI == "lab":
        stock_kernel(srv, b)
        readme_picture(srv, b)
        placed(srv, b)


def stock_kernel(srv, b):
    """A notebook on ipykernel's own kernelspec: the status item stays
    hidden (its usage_reply has no GPU fields)."""
    nb = dict(README_NOTEBOOK, cells=[{"cell_type": "markdown", "id": "m", "metadata": {}, "source": "Stock"}], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}})
    srv.curl("PUT", "/api/contents/stock.ipynb", {"type": "notebook", "format": "json", "content": nb})
    b.do("openpath", srv.url + "/lab/tree/stock.ipynb?reset&token=" + srv.token)
    time.sleep(6)  # the status item has asked its kernel at least once
    check_status(b, "", "stock_kernel")
    sess = [s for s in srv.curl("GET", "/api/sessions")[1] if s["path"] == "stock.ipynb"]
    assert len(sess) == 1 and sess[0]["kernel"]["name"] == "python3", "sessions: %s" % sess
    srv.curl("DELETE", "/api/sessions/" + sess[0]["id"], timeout=60)


def readme_picture(srv, b):
    srv.curl("PUT", "/api/contents/train.ipynb", {"type": "notebook", "format": "json", "content": README_NOTEBOOK})
    # reset: Lab's saved workspace would reopen the first notebook, whose
    # kernel is shut down, with a "Select Kernel" dialog over everything.
    b.do("openpath", srv.url + "/lab/tree/train.ipynb?reset&token=" + srv.token)
    started = b.do("runcell", "0")["output"].split()
    kernel, worker = int(started[1]), int(started[3])
    h.track(worker)
    b.do("startcell", "1")
    died = b.do("waitoutput", "the kernel died")["output"]
    h.note(readme_notice=died)
    assert "signal SIGSEGV" in died and "1 leftover process(es)" in died, "the crash cell says %r" % died
    b.do("dismiss")
    check_gone({kernel, worker}, "readme")
    # JupyterLab shows the restarted kernel as "Starting" until it is next
    # asked something (a stock kernel too): the user runs the next cell.
    fresh = int(b.do("runcell", "2")["output"].split()[-1])
    assert fresh not in (kernel, worker), "the cell after the crash ran in %d" % fresh
    b.do("shot", UI + "-readme")
    sess = [s for s in srv.curl("GET", "/api/sessions")[1] if s["path"] == "train.ipynb"]
    assert len(sess) == 1, "sessions: %s" % sess
    kid = sess[0]["kernel"]["id"]
    b.do("shutdown")
    _, _ = sh.poll(lambda: sh.ps_row(BIN, kid) is None, 10, 0.1)
    assert sh.ps_row(BIN, kid) is None, "readme: ps still has a row for %s after the shutdown" % kid


AUTO = "tfgpu-auto"


def install_auto_kernelspec():
    """A second kernelspec of ours with --gpus auto, where the server finds
    it (JUPYTER_PATH, read when the server starts)."""
    prefix = os.path.join(h.TMP, "auto-prefix")
    out = subprocess.run([BIN, "install", "--prefix", prefix, "--name", AUTO, "--display-name", "TF-GPU (auto GPU)",
                          "--python", h.PY, "--gpus", "auto"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, "install --gpus auto: %s%s" % (out.stdout, out.stderr)
    path = os.path.join(prefix, "share", "jupyter")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (path, os.environ.get("JUPYTER_PATH", "")) if p)


def placed(srv, b):
    """A notebook on the --gpus auto kernelspec, GPU0 held by another
    process: the first cell's output says the kernel got GPU1, and why; its
    CUDA_VISIBLE_DEVICES is GPU1's UUID; the status item's tooltip lists
    GPU1 only and says it was chosen."""
    r, w = os.pipe()
    holder = h.spawn_helper([h.PY, "-c", "import holder, os, time\nholder.hold(0, 4096)\nos.write(%d, b'x')\ntime.sleep(600)" % w],
                            pass_fds=(w,))
    os.close(w)
    with os.fdopen(r, "rb") as f:
        assert f.read(1) == b"x", "the GPU0 holder did not hold"
    nb = dict(README_NOTEBOOK, cells=[{"cell_type": "code", "id": "c", "metadata": {}, "outputs": [], "execution_count": None,
                                       "source": "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"}],
              metadata={"kernelspec": {"name": AUTO, "display_name": "TF-GPU (auto GPU)", "language": "python"}})
    srv.curl("PUT", "/api/contents/placed.ipynb", {"type": "notebook", "format": "json", "content": nb})
    b.do("openpath", srv.url + "/lab/tree/placed.ipynb?reset&token=" + srv.token)
    out = b.do("runcell", "0")["output"]
    h.note(placed_output=out)
    uuid1 = "GPU-fa4e0000-0000-0000-0000-000000000001"
    assert "--gpus auto chose GPU1 (Fake NVIDIA H200) with 141 GiB free of 141 GiB for this kernel" in out \
        and "not chosen: GPU0 (Fake NVIDIA H200) with 137 GiB free" in out and out.rstrip().endswith(uuid1), \
        "the first cell on the --gpus auto kernel shows %r" % out
    st = check_status(b, "GPU 0 MiB", "placed")
    h.note(placed_tooltip=st["title"])
    lines = st["title"].splitlines()
    assert [l for l in lines if l.startswith("GPU")] == ["GPU1 Fake NVIDIA H200: 0 MiB of 141 GiB"] \
        and "on GPU1, chosen by --gpus auto (141 GiB free then)" in lines, "the tooltip: %r" % st["title"]
    b.do("shot", UI + "-7-gpus-auto")
    sess = [s for s in srv.curl("GET", "/api/sessions")[1] if s["path"] == "placed.ipynb"]
    assert len(sess) == 1 and sess[0]["kernel"]["name"] == AUTO, "sessions: %s" % sess
    b.do("shutdown")
    holder.kill()
    holder.wait()


h.run(main)
