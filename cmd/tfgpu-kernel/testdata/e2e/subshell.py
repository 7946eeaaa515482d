"""Kernel subshells (JEP 91, ipykernel >= 7) through the relay: create,
list and delete subshells on control; a cell run in a subshell (its
shell request's header names the subshell_id) answers while the main
shell is busy with a cell that runs until the test releases it, so the
subshell's reply comes first (the order is checked, not a time)."""

import os
import queue
import time

import harness as h

# The main shell's cell: busy until the test creates the release file
# (bounded, so that a failed run ends).
MAIN_CELL = """import os, time
open(%r, "w").close()
_t = time.monotonic()
while not os.path.exists(%r) and time.monotonic() - _t < %d:
    time.sleep(0.01)
'main done'"""


def control(kc, msg_type, content, timeout=10):
    msg = kc.session.msg(msg_type, content)
    kc.control_channel.send(msg)
    end = time.time() + timeout
    while time.time() < end:
        r = kc.get_control_msg(timeout=max(0.1, end - time.time()))
        if r["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return r
    raise AssertionError("no reply to %s" % msg_type)


def execute_in(kc, code, subshell_id=None):
    msg = kc.session.msg("execute_request", {"code": code, "silent": False, "store_history": False,
                                             "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    if subshell_id is not None:
        msg["header"]["subshell_id"] = subshell_id
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def main():
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))
    info = kc.kernel_info(reply=True, timeout=20)["content"]
    h.check("kernel subshells" in info.get("supported_features", []), "kernel_info does not offer subshells: %s" % info)

    created = control(kc, "create_subshell_request", {})["content"]
    h.check(created.get("status") == "ok" and created.get("subshell_id"), "create_subshell_reply %s" % created)
    sid = created["subshell_id"]
    listed = control(kc, "list_subshell_request", {})["content"]
    h.check(listed.get("subshell_id") == [sid], "list_subshell_reply %s, want [%s]" % (listed, sid))

    # The main shell's cell runs until the test releases it: the order of
    # the replies, not a time, shows the subshell did not wait for it.
    started, release = os.path.join(h.TMP, "main-started"), os.path.join(h.TMP, "main-release")
    main_id = execute_in(kc, MAIN_CELL % (started, release, 2 * h.GONE_WAIT))
    busy, _ = h.wait_gone(lambda: not os.path.exists(started))  # the main shell is busy now
    h.check(not busy, "the main shell's cell never started")
    t0 = time.monotonic()
    sub_id = execute_in(kc, "print('from the subshell')", sid)
    order = []

    def replies(want, timeout):
        end = time.monotonic() + timeout
        while len(order) < want and time.monotonic() < end:
            try:
                r = kc.get_shell_msg(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                break
            pid = r["parent_header"].get("msg_id")
            if pid in (main_id, sub_id):
                order.append(("sub" if pid == sub_id else "main", round(time.monotonic() - t0, 3), r["content"]["status"]))

    replies(1, h.GONE_WAIT)  # the subshell's, while the main shell's cell still runs
    open(release, "w").close()
    replies(2, h.GONE_WAIT)
    h.note(order=order)
    h.check([o[0] for o in order] == ["sub", "main"], "the subshell's reply did not come while the main shell was busy: %s" % order)
    h.check(order and order[0][2] == "ok", "the subshell's cell failed: %s" % order)

    deleted = control(kc, "delete_subshell_request", {"subshell_id": sid})["content"]
    h.check(deleted.get("status") == "ok", "delete_subshell_reply %s" % deleted)
    listed = control(kc, "list_subshell_request", {})["content"]
    h.check(listed.get("subshell_id") == [], "after delete, list_subshell_reply %s" % listed)
    h.assert_answers(kc)
    km.shutdown_kernel()


h.run(main)
