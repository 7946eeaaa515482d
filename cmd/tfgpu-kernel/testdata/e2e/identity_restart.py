"""The victim of TestSecurityIdentitySurvivesRestart: a real user's
jupyter_client (Debian's /usr/bin/python3, standard library beside it)
with a known session id, whose kernel is restarted while another user
claims that id on shell, stdin and control. argv: how session_id log, where
the supervisors' output goes to the file log and how is

restart  restart_kernel(): shutdown_request with restart true, then the
         same connection file launched again (what JupyterLab's restart does)
now      restart_kernel(now=True): the supervisor process is SIGKILLed
death    the kernel is killed; once its supervisor has exited,
         restart_kernel(now=True), as the server's restarter does

The kernelspec is "tfgpu-race" on JUPYTER_PATH. On stdout, one line each:
"PORTS ip shell stdin control kernel_id" once the client holds its
identity on the three, then it waits for a line "restart" on stdin;
"OLD-GONE" when the old supervisor has exited and the new one is
about to be launched, then it waits for a line "go" on stdin; "OK" and a
JSON line of figures once the client has had, after the restart, a
kernel_info reply, an input_request ("Password: ") answered, and a control
reply. Anything else fails with a message on stderr and a non-zero exit.
"""

import json
import os
import queue
import signal
import sys
import time
import uuid

from jupyter_client import KernelManager

HOW, SID, LOG = sys.argv[1], sys.argv[2], sys.argv[3]
WAIT = 30  # a bound for what never comes, not a measure: the old code's restart took 45-57 s or never


def say(*a):
    print(*a, flush=True)


def reply_to(get, msg_id, what):
    deadline = time.monotonic() + WAIT
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            sys.exit("no %s within %d s" % (what, WAIT))
        try:
            m = get(timeout=left)
        except queue.Empty:
            continue
        if m["parent_header"].get("msg_id") == msg_id:
            return m


def password(kc, answer):
    """A cell that asks for a password: the input_request comes on stdin to
    this client's identity, and the cell ends with the answer."""
    msg_id = kc.execute("secret = input('Password: ')", allow_stdin=True)
    m = reply_to(kc.get_stdin_msg, msg_id, "input_request")
    if m["msg_type"] != "input_request" or m["content"].get("prompt") != "Password: ":
        sys.exit("stdin got %s %r" % (m["msg_type"], m["content"]))
    kc.input(answer)
    r = reply_to(kc.get_shell_msg, msg_id, "execute_reply")
    if r["content"]["status"] != "ok":
        sys.exit("the password cell: %r" % r["content"])


def control(kc):
    m = kc.session.msg("kernel_info_request")
    kc.control_channel.send(m)
    reply_to(kc.get_control_msg, m["header"]["msg_id"], "control reply")


def kernel_pid(kc):
    msg_id = kc.execute("import os", user_expressions={"pid": "os.getpid()"})
    r = reply_to(kc.get_shell_msg, msg_id, "execute_reply")
    return int(r["content"]["user_expressions"]["pid"]["data"]["text/plain"])


def main():
    home = os.environ["HOME"]
    km = KernelManager(kernel_name="tfgpu-race", connection_file=os.path.join(home, "kernel-%s.json" % uuid.uuid4()))
    km.session.session = SID  # the client's identity on shell, stdin and control
    log = open(LOG, "ab")
    km.start_kernel(stdout=log, stderr=log)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    pid = kernel_pid(kc)
    password(kc, "before")
    control(kc)
    info = km.get_connection_info()
    kernel_id = os.path.basename(km.connection_file)[len("kernel-"):-len(".json")]
    say("PORTS", info["ip"], info["shell_port"], info["stdin_port"], info["control_port"], kernel_id)
    if sys.stdin.readline().strip() != "restart":
        sys.exit("not told to restart")

    start = km.start_kernel

    def start_when_told(**kw):
        say("OLD-GONE")
        if sys.stdin.readline().strip() != "go":
            sys.exit("not told to go on")
        return start(**kw)

    km.start_kernel = start_when_told
    t0 = time.monotonic()
    if HOW == "restart":
        km.restart_kernel()
    elif HOW == "now":
        km.restart_kernel(now=True)
    elif HOW == "death":
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + WAIT
        while km.is_alive():  # the supervisor exits with its kernel
            if time.monotonic() > deadline:
                sys.exit("the supervisor outlived its kernel by %d s" % WAIT)
            time.sleep(0.05)
        km.restart_kernel(now=True)
    else:
        sys.exit("unknown how %r" % HOW)
    restarted = time.monotonic()
    kc.wait_for_ready(timeout=WAIT)
    ready = time.monotonic()
    password(kc, "after")
    control(kc)
    say("OK")
    say(json.dumps({"restart_s": round(restarted - t0, 3), "ready_after_s": round(ready - restarted, 3)}))
    kc.stop_channels()
    km.start_kernel = start
    km.shutdown_kernel()


main()
