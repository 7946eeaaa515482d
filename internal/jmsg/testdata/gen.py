#!/usr/bin/python3
"""Regenerate the captured fixtures in this directory with the real Jupyter stack.

Run from internal/jmsg:  /usr/bin/python3 testdata/gen.py
  - wire/*.json: frames from jupyter_client.session.Session.serialize (idents included),
    base64-encoded, with the key and scheme needed to verify them.
  - conn/jupyter-tcp.json, conn/jupyter-ipc.json: files written by
    jupyter_client.connect.write_connection_file (fixed ports/key so they are stable).
The random parts (msg_id, date, session) change on every run; the tests only rely on
what is stored, so regenerating is safe.
"""
import base64, json, os, sys
from jupyter_client.session import Session
from jupyter_client.connect import write_connection_file

here = os.path.dirname(os.path.abspath(__file__))

def capture(name, scheme, key, msg_type, content, parent=None, buffers=None,
            idents=(b"client-1",)):
    s = Session(key=key, signature_scheme=scheme, username="alice")
    msg = s.msg(msg_type, content=content, parent=parent)
    frames = s.serialize(msg, ident=list(idents))
    frames += list(buffers or [])
    out = {
        "scheme": scheme,
        "key": key.decode(),
        "msg_type": msg_type,
        "idents": len(idents),
        "frames": [base64.b64encode(f).decode() for f in frames],
    }
    with open(os.path.join(here, "wire", name + ".json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return msg

key = b"5f2b1c6e-0d6a-4c1b-9d6e-2a7f3c4b5e6d"
req = capture("execute_request-sha256", "hmac-sha256", key, "execute_request",
              {"code": 'print("héllo \\"world\\"")\n', "silent": False,
               "store_history": True, "user_expressions": {}, "allow_stdin": True,
               "stop_on_error": True})
capture("execute_reply-sha256", "hmac-sha256", key, "execute_reply",
        {"status": "ok", "execution_count": 1, "user_expressions": {}}, parent=req)
capture("shutdown_request-sha256", "hmac-sha256", key, "shutdown_request",
        {"restart": False}, idents=(b"\x00k\x8bEg", b"second-ident"))
capture("comm_msg-buffers-sha256", "hmac-sha256", key, "comm_msg",
        {"comm_id": "c1", "data": {}}, buffers=[b"\x00\x01\x02binary", b""])
for alg in ("sha1", "md5", "sha512", "sha384", "sha224"):
    capture("kernel_info_request-" + alg, "hmac-" + alg, key, "kernel_info_request", {})
capture("interrupt_request-nokey", "hmac-sha256", b"", "interrupt_request", {})
capture("status-unicode", "hmac-sha256", "ключ-🔑".encode(), "status",
        {"execution_state": "busy", "note": "ünïcödé ✓"}, idents=())

for transport, ip, ports in (("tcp", "127.0.0.1", (50001, 50002, 50003, 50004, 50005)),
                             ("ipc", "/tmp/tfgpu-kernel-test/kernel-ipc", (1, 2, 3, 4, 5))):
    fname = os.path.join(here, "conn", "jupyter-%s.json" % transport)
    write_connection_file(fname, ip=ip, key=key, transport=transport,
                          shell_port=ports[0], iopub_port=ports[1], stdin_port=ports[2],
                          control_port=ports[3], hb_port=ports[4],
                          signature_scheme="hmac-sha256", kernel_name="python3")
    os.chmod(fname, 0o644)  # committed fixture; WriteFile's 0600 is tested separately
print("ok", file=sys.stderr)
