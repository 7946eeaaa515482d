"""Bad settings (issue 34): the Jupyter server's environment holds a TFGPU_
variable run cannot take, so no kernel can start the way it was asked to.
run exited 2 with the error in the server log only; the restarter tried
about six times and JupyterLab showed "No Kernel | Disconnected". Now the
kernel becomes ready (wait_for_ready) without an ipykernel, every cell
gets an error reply (TFGPUSettingsError) whose evalue is the one line
naming the variable as it was set, and the line on its stderr; an
interrupt ends nothing; a restart is a new run that refuses in its turn;
shutdown ends it with exit 0, jupyter_client never escalating. The server
log has the line once per run and nothing else.
argv[1]: "value" (TFGPU_CONFIRM_TIMEOUT=5: a duration without its unit) or
"unknown" (TFGPU_MEMORY_LIMT=8G: a typo of TFGPU_MEMORY_LIMIT)."""

import os
import sys

import harness as h

CASES = {
    "value": ("TFGPU_CONFIRM_TIMEOUT", "5", ['TFGPU_CONFIRM_TIMEOUT="5"', "want a duration such as"]),
    "unknown": ("TFGPU_MEMORY_LIMT", "8G", ["TFGPU_MEMORY_LIMT:", "no such setting", "TFGPU_MEMORY_LIMIT"]),
}
VAR, VALUE, SAYS = CASES[sys.argv[1] if len(sys.argv) > 1 else "value"]


def refused(kc, what):
    """A cell is answered with the settings error, and runs nothing."""
    r = h.execute(kc, "print('ran ' + 'here')", timeout=30)
    rep = r["reply"]
    assert rep is not None, "%s: no execute_reply (iopub %s)" % (what, h.types(r))
    assert r["status"] == "error" and rep.get("ename") == "TFGPUSettingsError", \
        "%s: status %s, ename %r: %r" % (what, r["status"], rep.get("ename"), rep.get("evalue"))
    evalue = rep.get("evalue", "")
    assert all(s in evalue for s in SAYS) and "\n" not in evalue, \
        "%s: evalue %r does not say %s in one line" % (what, evalue, SAYS)
    assert r["idle"], "%s: no idle status on iopub (got %s)" % (what, h.types(r))
    assert all(s in r["stderr"] for s in SAYS), "%s: the cell's stderr %r does not say %s" % (what, r["stderr"], SAYS)
    assert "ran here" not in r["stdout"], "%s: the cell ran: %r" % (what, r["stdout"])
    # A kernel's counter, which clients do arithmetic on (jupyter console).
    assert isinstance(rep.get("execution_count"), int), "%s: execution_count %r" % (what, rep.get("execution_count"))
    return r


def main():
    # As if the Jupyter server had been started with it: jupyter_client
    # passes its environment on to the kernel it launches.
    os.environ[VAR] = VALUE
    km, kc = h.start_kernel()  # wait_for_ready: kernel_info was answered
    first = km.provisioner.pid
    r = refused(kc, "the first cell")
    h.note(evalue=r["reply"]["evalue"], stderr=r["stderr"])
    kids = h.descendants(first)
    assert not kids, "the refusing run started processes: %s" % h.describe(kids)

    # An interrupt (the kernelspec's signal mode: SIGINT) has nothing to
    # interrupt, and does not end the run.
    km.interrupt_kernel()
    refused(kc, "a cell after an interrupt")
    assert km.is_alive(), "the run ended after an interrupt"

    # A restart: the run answers the shutdown_request and exits 0; the new
    # run refuses in its turn.
    old = km.provisioner.process
    km.restart_kernel()
    h.note(restart_shutdown_status=h.shutdown_status(km), first_exit=old.returncode)
    assert h.shutdown_status(km) == "ShutdownRequest", "restart: jupyter_client escalated to %s" % h.shutdown_status(km)
    assert old.returncode == 0, "the first run exited %s on the restart's shutdown_request, want 0" % old.returncode
    h.track(km.provisioner.pid)
    assert km.provisioner.pid != first, "restart_kernel started no new process"
    kc.stop_channels()
    kc = h.connect(km)
    refused(kc, "a cell after a restart")

    last = km.provisioner.process
    km.shutdown_kernel()
    h.note(shutdown_status=h.shutdown_status(km), last_exit=last.returncode)
    assert h.shutdown_status(km) == "ShutdownRequest", "shutdown: jupyter_client escalated to %s" % h.shutdown_status(km)
    assert last.returncode == 0, "the run exited %s on shutdown, want 0" % last.returncode
    assert not h.survivors([first, last.pid]), "alive after shutdown: %s" % h.describe(h.survivors([first, last.pid]))

    # The server log: the line, once per run, and nothing else.
    with open(km.e2e_log, errors="replace") as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    h.note(server_log=lines)
    assert len(lines) == 2 and all(l.startswith("tfgpu-kernel run: ") and all(s in l for s in SAYS) for l in lines), \
        "the server log: %r; want the line once for each of the two runs" % lines


h.run(main)
