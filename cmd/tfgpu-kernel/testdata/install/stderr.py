"""Start the kernelspec named argv[1] through jupyter_client with the
kernel's stdout and stderr in files, attach the debugger as JupyterLab
does, run one cell, shut it down, and print "RESULT {json}": the cell's output, what the kernel's
processes printed to stdout and stderr and on iopub outside the cell
(lines), and the launched process's pid. Used by
TestE2EInstall to compare what a kernel prints with what the stock one
prints."""

import json
import queue
import sys
import tempfile
import time

from jupyter_client import KernelManager

out = tempfile.TemporaryFile(mode="w+")
err = tempfile.TemporaryFile(mode="w+")
km = KernelManager(kernel_name=sys.argv[1])
km.start_kernel(stdout=out, stderr=err)
res = {"pid": km.provisioner.pid}
iopub = []
try:
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    # What JupyterLab's debugger does (the spec says debugger: true):
    # ipykernel then starts debugpy, whose pydevd warns about frozen
    # modules on Python >= 3.11 unless -Xfrozen_modules=off. What the
    # kernel prints meanwhile, on iopub or its own stderr, is collected.
    args = {"clientID": "jupyterlab", "adapterID": "python", "pathFormat": "path",
            "linesStartAt1": True, "columnsStartAt1": True}
    for seq, (command, arguments) in enumerate([("initialize", args), ("attach", {})], 1):
        kc.control_channel.send(kc.session.msg("debug_request", {
            "type": "request", "seq": seq, "command": command, "arguments": arguments}))
        reply = kc.get_control_msg(timeout=60)
        res[command] = reply["content"].get("success")
    end = time.monotonic() + 2
    while time.monotonic() < end:
        try:
            m = kc.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            continue
        if m["msg_type"] == "stream":
            iopub += m["content"]["text"].splitlines()
    text = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            text.append(msg["content"]["text"])

    reply = kc.execute_interactive("import sys; print(sys.executable, 6 * 7)", timeout=60, output_hook=hook)
    res["status"] = reply["content"]["status"]
    res["cell"] = "".join(text)
    kc.stop_channels()
finally:
    km.shutdown_kernel(now=False)
res["iopub"] = [l for l in iopub if l.strip()]
for name, f in (("stdout", out), ("stderr", err)):
    f.seek(0)
    res[name] = [l for l in f.read().splitlines() if l.strip()]
print("RESULT " + json.dumps(res), flush=True)
