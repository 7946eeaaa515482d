"""Kernel subshells (JEP 91, ipykernel >= 7) through the relay: create,
list and delete subshells on control; a cell run in a subshell (its
shell request's header names the subshell_id) answers while the main
shell is busy with a long cell, so the replies interleave."""

import time

import harness as h


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

    main_id = execute_in(kc, "import time; time.sleep(3); 'main done'")
    time.sleep(0.5)  # the main shell is busy now
    t0 = time.time()
    sub_id = execute_in(kc, "print('from the subshell')", sid)
    order = []
    end = time.time() + 20
    while len(order) < 2 and time.time() < end:
        r = kc.get_shell_msg(timeout=max(0.1, end - time.time()))
        pid = r["parent_header"].get("msg_id")
        if pid in (main_id, sub_id):
            order.append(("sub" if pid == sub_id else "main", round(time.time() - t0, 3), r["content"]["status"]))
    h.note(order=order)
    h.check([o[0] for o in order] == ["sub", "main"], "the subshell's reply did not come first: %s" % order)
    h.check(order and order[0][1] < 2.0 and order[0][2] == "ok", "the subshell waited for the main shell: %s" % order)

    deleted = control(kc, "delete_subshell_request", {"subshell_id": sid})["content"]
    h.check(deleted.get("status") == "ok", "delete_subshell_reply %s" % deleted)
    listed = control(kc, "list_subshell_request", {})["content"]
    h.check(listed.get("subshell_id") == [], "after delete, list_subshell_reply %s" % listed)
    h.assert_answers(kc)
    km.shutdown_kernel()


h.run(main)
