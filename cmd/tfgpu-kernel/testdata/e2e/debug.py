"""JupyterLab's debugger through the supervisor (issue 5): the kernelspec
says metadata.debugger: true, so JupyterLab sends debug_request messages on
the control channel and reads debug_reply (control) and debug_event
(iopub). A debug_request "initialize", as JupyterLab sends it first, gets a
successful debug_reply through the relay; then "attach" is answered too and
the debugger's "initialized" event arrives on iopub."""

import json
import os
import queue
import time

import harness as h


def debug_request(kc, seq, command, arguments):
    msg = kc.session.msg("debug_request", {"type": "request", "seq": seq, "command": command, "arguments": arguments})
    kc.control_channel.send(msg)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            reply = kc.get_control_msg(timeout=1)
        except queue.Empty:
            continue
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return reply
    raise AssertionError("no debug_reply to %s within 30 s" % command)


def main():
    spec = json.load(open(os.path.join(os.environ["JUPYTER_PATH"], "kernels", h.KERNEL, "kernel.json")))
    h.note(metadata=spec.get("metadata"))
    h.check(spec.get("metadata", {}).get("debugger") is True, "kernel.json lacks metadata.debugger: true")
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))
    r = debug_request(kc, 1, "initialize", {
        "clientID": "tfgpu-e2e", "clientName": "tfgpu-e2e", "adapterID": "python", "pathFormat": "path",
        "linesStartAt1": True, "columnsStartAt1": True, "supportsVariableType": True,
        "supportsVariablePaging": True, "supportsRunInTerminalRequest": True, "locale": "en"})
    h.note(initialize_reply=r["content"])
    assert r["msg_type"] == "debug_reply", r["msg_type"]
    assert r["content"].get("success") is True and r["content"].get("command") == "initialize", r["content"]
    r = debug_request(kc, 2, "attach", {})
    h.note(attach_reply={k: r["content"].get(k) for k in ("success", "command", "message")})
    assert r["content"].get("command") == "attach", r["content"]
    events = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(e.get("event") == "initialized" for e in events):
        try:
            m = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        if m["msg_type"] == "debug_event":
            events.append(m["content"])
    h.note(debug_events=[e.get("event") for e in events])
    assert any(e.get("event") == "initialized" for e in events), "no debug_event 'initialized' on iopub: %s" % events
    h.assert_answers(kc, "kernel after the debugger attached")
    km.shutdown_kernel(now=False)


h.run(main)
