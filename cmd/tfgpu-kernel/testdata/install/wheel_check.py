"""What a user of the wheel meets, driven by that environment's jupyter_client.

Run by TestE2EWheel with the Python of a venv that has only the wheel and a
Jupyter stack installed (no Go, C compiler or Node on PATH):

    python wheel_check.py [--gpu]

It finds "tfgpu" among the kernelspecs, starts it with KernelManager as
a Jupyter server does, has a cell start a worker in a session of its own
(with --gpu: a holder of the fake GPU, testdata/fakenvml.c), restarts,
checks the worker is gone and the new kernel answers, shuts down, and
prints one line, WHEEL-RESULT {json}, for the test to judge. Python 3.8+,
stdlib and jupyter_client only.
"""

import json
import os
import sys

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

TIMEOUT = 120


def state(pid):
    """The process's state letter, or None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def run_cell(kc, code):
    out = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("%s: %s" % (msg["content"]["ename"], msg["content"]["evalue"]))

    reply = kc.execute_interactive(code, timeout=TIMEOUT, output_hook=hook)
    return reply["content"]["status"], "".join(out)


def main():
    gpu = "--gpu" in sys.argv[1:]
    facts = {"python": sys.executable}
    specs = KernelSpecManager().get_all_specs()
    facts["specs"] = sorted(specs)
    spec = specs["tfgpu"]
    facts["resource_dir"] = spec["resource_dir"]
    facts["display_name"] = spec["spec"]["display_name"]
    facts["argv"] = spec["spec"]["argv"]
    facts["spec_version"] = spec["spec"]["metadata"]["tfgpu"]["version"]

    km = KernelManager(kernel_name="tfgpu")
    km.start_kernel()
    facts["supervisor"] = km.provisioner.process.pid if getattr(km, "provisioner", None) else km.kernel.pid
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=TIMEOUT)
        if gpu:
            code = "import holder, os, sys; print(holder.escape(0, 300, 'setsid'), os.getpid(), sys.executable)"
        else:
            code = ("import subprocess, os, sys\n"
                    "p = subprocess.Popen(['sleep', '1000'], start_new_session=True)\n"
                    "print(p.pid, os.getpid(), sys.executable)")
        status, out = run_cell(kc, code)
        facts["cell1"] = [status, out]
        worker, kernel, kernel_python = out.split()
        worker, kernel = int(worker), int(kernel)
        facts["kernel_python"] = kernel_python
        facts["worker_before"] = state(worker)
        with open("/proc/%d/cmdline" % facts["supervisor"], "rb") as f:
            facts["supervisor_cmdline"] = [a.decode() for a in f.read().split(b"\0")[:-1]]
        facts["kernel_env"] = run_cell(kc, "import os; print(os.environ.get('WHEEL_SETTING', ''))")[1].strip()
        km.restart_kernel()
        kc.wait_for_ready(timeout=TIMEOUT)
        # The restart has returned: the old tree must be gone already.
        facts["worker_after_restart"] = state(worker)
        facts["old_kernel_after_restart"] = state(kernel)
        facts["cell2"] = list(run_cell(kc, "print(6 * 7)"))
    finally:
        kc.stop_channels()
        km.shutdown_kernel()
    facts["supervisor_after_shutdown"] = state(facts["supervisor"])
    print("WHEEL-RESULT " + json.dumps(facts), flush=True)


if __name__ == "__main__":
    main()
