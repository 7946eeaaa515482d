"""Start each kernelspec named on the command line through jupyter_client,
run one cell in it and shut it down; used by TestInstallWrap.

The cell reports its environment (FOO, EXTRA, JPY_PARENT_PID), its parent
process and that parent's executable. The last line printed is
"RESULT <json>": {"<name>": {cell report, "provisioner_pid": the process
jupyter_client started, "status": execute_reply status}, "pids": [...],
"script_pid": this process, "error": traceback or absent}. Every kernel is
shut down before that line, whatever happened.
"""

import json
import os
import sys
import traceback

from jupyter_client import KernelManager

CELL = r"""
import json, os
_pp = os.getppid()
try:
    _exe = os.readlink("/proc/%d/exe" % _pp)
except OSError as e:
    _exe = "unreadable: %s" % e
print("CELL " + json.dumps({
    "pid": os.getpid(), "ppid": _pp, "ppid_exe": _exe,
    "foo": os.environ.get("FOO"), "extra": os.environ.get("EXTRA"),
    "jpy_parent_pid": os.environ.get("JPY_PARENT_PID"),
}))
"""

KMS = []


def run_cell(name):
    km = KernelManager(kernel_name=name)
    KMS.append(km)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        out = []

        def hook(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])

        reply = kc.execute_interactive(CELL, timeout=60, output_hook=hook)
        lines = [l for l in "".join(out).splitlines() if l.startswith("CELL ")]
        r = json.loads(lines[0][len("CELL "):]) if lines else {"output": "".join(out)}
        r["provisioner_pid"] = km.provisioner.pid
        r["status"] = reply["content"]["status"]
        return r
    finally:
        kc.stop_channels()


def main():
    res = {"pids": [], "script_pid": os.getpid()}
    try:
        for name in sys.argv[1:]:
            r = run_cell(name)
            res[name] = r
            res["pids"] += [p for p in (r.get("pid"), r.get("provisioner_pid")) if p]
    except Exception:
        res["error"] = traceback.format_exc()
    finally:
        for km in KMS:
            try:
                km.shutdown_kernel(now=False)
            except Exception as e:
                print("shutdown %s: %s" % (km.kernel_name, e), file=sys.stderr)
    print("RESULT " + json.dumps(res), flush=True)


main()
