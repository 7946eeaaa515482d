"""Scenario 2: input() answered through the stdin channel (ipykernel sends
input_request on its stdin ROUTER to the shell request's identity)."""

import harness as h


def main():
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))
    for answer in ("tfgpu", "second answer"):
        r = h.ok(h.execute(kc, "x = input('name? ')\nprint('got', repr(x))", allow_stdin=True, stdin_answer=answer), "input()")
        assert r["input_prompts"] == ["name? "], "input_request prompts: %s" % r["input_prompts"]
        assert "got %r" % answer in r["stdout"], "answer did not reach the kernel: stdout %r" % r["stdout"]
    # getpass goes through the same channel with password=True
    r = h.ok(h.execute(kc, "import getpass\np = getpass.getpass('pw: ')\nprint(len(p))", allow_stdin=True, stdin_answer="secret"), "getpass()")
    assert r["stdout"].strip() == "6", "getpass: stdout %r" % r["stdout"]
    # without allow_stdin the kernel refuses input() cleanly
    r = h.execute(kc, "input()", allow_stdin=False)
    assert r["status"] == "error" and r["reply"]["ename"] == "StdinNotImplementedError", "input() without stdin: %s" % r["reply"]
    h.assert_answers(kc)
    km.shutdown_kernel()
    h.note(shutdown_status=h.shutdown_status(km))


h.run(main)
