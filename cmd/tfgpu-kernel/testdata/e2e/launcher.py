"""Scenario 6, Python side: a stand-in for the Jupyter server. It starts a
kernel with KernelManager, has it start a setsid'd daemon and a
SIGTERM-ignoring child, prints one line "E2E-LAUNCHED <json>" with every pid
(supervisor, kernel, children), then sleeps until the Go test SIGKILLs it.
The Go test then checks that nothing of the kernel's tree survives 2 s later."""

import json
import sys
import time

import harness as h


def main():
    km, kc = h.start_kernel()
    kids = h.spawn_children(kc)
    pids = sorted(set(h.tree_of(km) + list(kids.values())))
    info = dict(kids, supervisor=km.provisioner.pid, all=pids, tree=h.describe(pids))
    print("E2E-LAUNCHED " + json.dumps(info), flush=True)
    time.sleep(120)  # the Go test SIGKILLs us long before this
    raise AssertionError("launcher was not killed within 120 s")


h.run(main)
