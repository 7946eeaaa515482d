"""Scenario 3: time.sleep(60) interrupted -> KeyboardInterrupt, kernel still
usable (how long the interrupt took is noted, not asserted). argv[1] is the
interrupt mode: "signal" (SIGINT to the process group jupyter_client
started, i.e. the supervisor) or "message" (interrupt_request on the
control channel)."""

import sys
import time

import harness as h

MODE = sys.argv[1] if len(sys.argv) > 1 else "signal"


def sleeping(r):
    """The cell said it is about to sleep: an interrupt from now on is a
    KeyboardInterrupt of the cell, in time.sleep or just before it."""
    return "SLEEPING" in r["stdout"]


def main():
    km, kc = h.start_kernel(interrupt_mode=MODE)
    assert km.kernel_spec.interrupt_mode == MODE
    h.track(h.kernel_pid(kc))
    for round_ in range(2):
        msg_id = kc.execute("import time\nprint('SLEEPING', flush=True)\ntime.sleep(60)")
        r = h.collect(kc, msg_id, timeout=20, stop=sleeping)
        assert sleeping(r), "sleep cell never started: %s" % h.types(r)
        t0 = time.monotonic()
        km.interrupt_kernel()
        r2 = h.collect(kc, msg_id, timeout=h.GONE_WAIT, t0=t0)
        assert r2["reply"] is not None, "no execute_reply within %d s of interrupt (%s mode)" % (h.GONE_WAIT, MODE)
        assert r2["status"] == "error" and r2["reply"].get("ename") == "KeyboardInterrupt", "reply after interrupt: %s" % r2["reply"]
        h.note(**{"interrupt_to_reply_s_%d" % round_: round(r2["reply_at"], 3)})
        h.assert_answers(kc, "after interrupt %d" % round_)
    km.shutdown_kernel()
    h.note(mode=MODE, shutdown_status=h.shutdown_status(km))


h.run(main)
