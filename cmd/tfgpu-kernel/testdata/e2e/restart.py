"""Scenario 4: KernelManager.restart_kernel() and shutdown_kernel() with a
kernel that started a setsid'd double-forked daemon and a child ignoring
SIGTERM/SIGINT/SIGHUP. With the supervisor: jupyter_client's shutdown status
stays "ShutdownRequest" (it never needed SIGTERM or SIGKILL), every process
of the old tree is gone by the time the call returns, the new kernel answers.
argv[1]: "restart" (restart then shutdown) or "shutdown" (shutdown only)."""

import os
import signal
import sys
import time

import harness as h

WHAT = sys.argv[1] if len(sys.argv) > 1 else "restart"


def count_escalations(km):
    """Wrap jupyter_client's own escalation steps (finish_shutdown calls them
    when the process outlives half, then all, of shutdown_wait_time) so the
    test sees them directly, besides km._shutdown_status."""
    calls = {"sigterm": 0, "sigkill": 0}
    sigterm, kill = km._send_kernel_sigterm, km._kill_kernel

    def _sigterm(*a, **kw):
        calls["sigterm"] += 1
        return sigterm(*a, **kw)

    def _kill(*a, **kw):
        calls["sigkill"] += 1
        return kill(*a, **kw)

    km._send_kernel_sigterm, km._kill_kernel = _sigterm, _kill
    return calls


def stop_and_check(km, kc, how):
    calls = count_escalations(km)
    kids = h.spawn_children(kc)
    old = sorted(set(h.tree_of(km) + list(kids.values())))
    h.note(**{how + "_tree": h.describe(old)})
    t0 = time.monotonic()
    if how == "restart":
        km.restart_kernel()
    else:
        km.shutdown_kernel()
    took = time.monotonic() - t0
    left_now = h.survivors(old)
    left_2s = h.wait_dead(old, h.TREE_WAIT)
    h.note(**{
        how + "_tree_gone_after_return_s": round(time.monotonic() - t0 - took, 3) if not left_2s else None,
        how + "_s": round(took, 3),
        how + "_shutdown_status": h.shutdown_status(km),
        how + "_escalations": dict(calls),
        how + "_survivors_on_return": h.describe(left_now),
        how + "_survivors_left": h.describe(left_2s),
    })
    h.check(h.shutdown_status(km) == "ShutdownRequest",
            "%s: jupyter_client escalated to %s (the supervisor did not exit within 2.5 s of shutdown_request)" % (how, h.shutdown_status(km)))
    h.check(calls == {"sigterm": 0, "sigkill": 0}, "%s: jupyter_client had to signal the process it started: %s" % (how, calls))
    h.check(not left_now, "%s: processes of the old tree alive when %s returned: %s" % (how, how, h.describe(left_now)))
    h.check(not left_2s, "%s: processes of the old tree alive %d s later: %s" % (how, h.TREE_WAIT, h.describe(left_2s)))
    # whatever the stock kernel leaves must not leak into later checks
    for p in left_2s:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def main():
    km, kc = h.start_kernel()
    if WHAT == "restart":
        stop_and_check(km, kc, "restart")
        kc.stop_channels()
        kc = h.connect(km)
        newpid = h.kernel_pid(kc)
        h.track(km.provisioner.pid, newpid)
        h.assert_answers(kc, "new kernel after restart")
        h.note(new_kernel_pid=newpid)
    stop_and_check(km, kc, "shutdown")


h.run(main)
