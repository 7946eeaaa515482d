"""Keyless peers of another real user (docs/security.md#threats, class 1):
the attacker is a user made for the test (E2E_ATTACKER="uid:gid"), running
peers_attack.py (E2E_ATTACK_SCRIPT) with Debian's Python through setpriv,
with no key; the victim is this scenario's jupyter_client, the kernel's
owner. argv[1] is the mode:

mode     attack                                          must hold
budget   A: 6 connections to shell each sending all but  every cell of the victim
         a byte of a 64 MiB frame, reconnecting when      runs (liveness bound
         closed (--max-message-size 64M: the supervisor's 20 s), 8 MB ones too,
         receive budget is 128 MiB)                        during the attack
claim    B: another user claims the victim's shell        the attacker gets no
         identity (read off iopub) again and again while  frame, the victim every
         the victim's channels drop and reconnect 3 times reply with its secret
slowsub  G: a SUB of another user reading 2.5 MB/s        the victim gets all its
         while the victim prints 60 MB                     output; the attacker
                                                           misses part of it (it
                                                           never holds the writer)

Against a stock kernel (TFGPU_E2E_KERNEL=python3) the expectations are
reported as facts.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import harness as h

MODE = sys.argv[1] if len(sys.argv) > 1 else "budget"
UID, GID = os.environ["E2E_ATTACKER"].split(":")
SCRIPT = os.environ["E2E_ATTACK_SCRIPT"]


class Attack:
    """peers_attack.py as the other user; stop() returns its counters."""

    def __init__(self, mode, ip, port, *args):
        argv = ["setpriv", "--reuid=" + UID, "--regid=" + GID, "--clear-groups",
                "/usr/bin/python3", SCRIPT, mode, ip, str(port)] + [str(a) for a in args]
        self.p = h.spawn_helper(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
        line = self.p.stdout.readline()
        assert line.strip() == b"started", "the attack did not start: %r %r" % (line, self.p.stderr.read() if self.p.poll() is not None else b"")

    def stop(self):
        out, err = self.p.communicate(timeout=30)  # closes stdin: the attack stops
        lines = out.decode().strip().splitlines()
        assert lines, "the attack printed nothing; stderr %r" % err[-2000:]
        return json.loads(lines[-1])


def zmtp_lines(km):
    """The supervisor's zmtp log lines (what it did about the peers)."""
    try:
        with open(km.e2e_log, errors="replace") as f:
            return [l.strip()[:300] for l in f if "zmtp:" in l][-12:]
    except OSError:
        return []


def ports(km):
    info = km.get_connection_info()
    return info["ip"], {c: info["%s_port" % c] for c in ("shell", "iopub", "stdin", "control", "hb")}


def budget():
    os.environ["TFGPU_MAX_MESSAGE_SIZE"] = "64M"  # the supervisor's; a stock kernel ignores it
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))
    ip, port = ports(km)
    a = Attack("fill", ip, port["shell"], 6, 64 << 20)
    time.sleep(3)  # 384 MiB offered against a 128 MiB budget: full by now
    times, failed = [], []
    end = time.monotonic() + 10
    big = "x = '" + "a" * 8_000_000 + "'\nlen(x)"
    i = 0
    while time.monotonic() < end:
        code = big if i % 3 == 2 else "%d + 1" % i
        r = h.execute(kc, code, timeout=20)
        if r["status"] != "ok":
            failed.append("cell %d (%d bytes): %s" % (i, len(code), r["status"]))
            break
        times.append(r["elapsed"])
        i += 1
    counters = a.stop()
    h.note(attacker=counters, cells=len(times), cell_s_median=round(statistics.median(times), 3) if times else None,
           cell_s_max=round(max(times), 3) if times else None, supervisor_rss_kib=h.rss_kib(km.provisioner.pid))
    assert counters.get("held", 0) > 0, "the attack never held an unfinished message: %s" % counters
    h.check(not failed, "the victim's cells failed during the attack: %s" % failed)
    h.check(counters.get("closed", 0) > 0, "no attacker connection was closed: was the budget ever full? %s" % counters)
    h.ok(h.execute(kc, "1"), "a cell after the attack")


def claim():
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))
    ip, port = ports(km)
    sid = kc.session.bsession.decode()
    h.note(victim_identity=sid)
    a = Attack("claim", ip, port["shell"], sid)
    time.sleep(1)
    replies = 0
    for round_ in range(3):
        # Her channels drop and come back (as attack A made them, or a
        # network blip): libzmq reconnects with the same identity.
        kc.stop_channels()
        time.sleep(0.5)  # the attacker races all this while
        kc = km.client()  # the manager's session: the same identity
        assert kc.session.bsession.decode() == sid
        kc.start_channels()
        kc.wait_for_ready(timeout=30)
        msg_id = kc.execute("secret = 'SECRET-%d'" % round_, user_expressions={"s": "secret"})
        try:
            reply = h.shell_reply(kc, msg_id, timeout=20)
            if "SECRET-%d" % round_ in json.dumps(reply["content"]):
                replies += 1
        except AssertionError as e:
            h.log("round %d: %s" % (round_, e))
    counters = a.stop()
    h.note(attacker=counters, victim_replies=replies)
    assert counters.get("refused", 0) + counters.get("claimed", 0) > 0, "the attack never claimed: %s" % counters
    h.check(counters.get("got", 0) == 0, "the attacker received %d frames routed to the victim's identity (%d with the secret)" % (counters.get("got", 0), counters.get("got_secret", 0)))
    h.check(counters.get("claimed", 0) == 0, "another user's claim of the victim's identity was kept %d times" % counters.get("claimed", 0))
    h.check(replies == 3, "the victim got %d of 3 replies after reconnecting" % replies)


def slowsub():
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))
    ip, port = ports(km)
    n = 60_000_000
    code = "print('y' * %d, end='')" % n
    alone = h.ok(h.execute(kc, code, timeout=120), "60 MB without the attacker")
    a = Attack("slowsub", ip, port["iopub"], 2_500_000)
    time.sleep(1)  # the subscription lands
    attacked = h.ok(h.execute(kc, code, timeout=120), "60 MB with the attacker reading")
    after = h.ok(h.execute(kc, "pass", timeout=60), "the next cell")
    counters = a.stop()
    h.note(zmtp_log=zmtp_lines(km))
    h.note(attacker=counters, print_alone_s=round(alone["elapsed"], 2), print_attacked_s=round(attacked["elapsed"], 2),
           next_cell_s=round(after["elapsed"], 3), attacked_over_alone=round(attacked["elapsed"] / alone["elapsed"], 2))
    assert len(alone["stdout"]) == n and len(attacked["stdout"]) == n, "the victim got %d and %d of %d bytes" % (len(alone["stdout"]), len(attacked["stdout"]), n)
    assert counters.get("bytes", 0) > 0, "the slow subscriber read nothing: %s" % counters
    h.check(counters.get("bytes", 0) < n, "the slow subscriber got all %d bytes of output: it held the kernel's output up to its pace (%s)" % (n, counters))


h.run({"budget": budget, "claim": claim, "slowsub": slowsub}[MODE])
