"""iopub welcomes (messaging spec 5.5, JEP 65): since ipykernel 7.2 the
kernel's iopub is an XPUB that answers each topic's first subscriber with a
signed iopub_welcome, published under that topic. Through the wrapper every
client must see what it would see from the bare kernel:

- a client subscribing to a new topic gets its welcome, signed with the key,
  in the kernel's session, with the topic as first frame;
- a second subscriber of a topic already subscribed gets none (an XPUB
  reports only a topic's first subscriber);
- the welcome the kernel sends the relay's own subscription reaches nobody;
- a kernel that does not welcome (ipykernel < 7.2) is left as it is: no
  welcomes at all.

Run against the bare kernel too (E2E_KERNEL=<stock spec>), the same checks hold.
"""

import time

import zmq
from jupyter_client.session import Session

import harness as h

TOPIC = b"kernel.welcome-test."


def welcomes(sock, sess, seconds):
    """The iopub_welcome messages sock receives within seconds."""
    out = []
    end = time.time() + seconds
    while time.time() < end:
        if not sock.poll(50):
            continue
        frames = sock.recv_multipart()
        idents, msg = sess.feed_identities(frames)
        m = sess.deserialize(msg)  # checks the signature
        if m["msg_type"] == "iopub_welcome":
            out.append((idents, m))
    return out


def main():
    km, kc = h.start_kernel()
    h.track(h.kernel_pid(kc))
    info = kc.kernel_info(reply=True, timeout=20)["content"]
    r = h.ok(h.execute(kc, "import ipykernel; print(ipykernel.__version__)"), "ipykernel version")
    version = tuple(int(x) for x in r["stdout"].strip().split(".")[:2])
    speaks = version >= (7, 2)
    h.note(ipykernel=r["stdout"].strip(), protocol=info.get("protocol_version"), welcomes=speaks)

    # The kernelspec declares the protocol the kernel inside declares in its
    # own spec (5.5 with welcomes since ipykernel 7.2, none before): the relay
    # passes kernel_info_reply and iopub through, so the protocol is the
    # kernel's. (ipykernel 7.4's kernel_info_reply itself says 5.3: upstream.)
    from ipykernel.kernelspec import get_kernel_dict
    from jupyter_client.kernelspec import KernelSpecManager

    declared = KernelSpecManager().get_kernel_spec(h.KERNEL).to_dict().get("kernel_protocol_version") or ""
    bare = get_kernel_dict().get("kernel_protocol_version", "")
    h.note(spec_protocol=declared, bare_spec_protocol=bare)
    h.check(declared == bare, "kernelspec %s declares kernel_protocol_version %r; the kernel's own spec %r" % (h.KERNEL, declared, bare))
    h.check(speaks == (declared >= "5.5"), "welcomes %s, but the kernelspec declares protocol %r" % (speaks, declared))

    ci = km.get_connection_info()
    key = ci["key"] if isinstance(ci["key"], bytes) else ci["key"].encode()
    ctx = zmq.Context()
    url = "%s://%s:%d" % (ci["transport"], ci["ip"], ci["iopub_port"])

    def sub(topic):
        s = ctx.socket(zmq.SUB)
        s.setsockopt(zmq.SUBSCRIBE, topic)
        s.connect(url)
        return s

    # Every deserialize needs a Session of its own: the digest history
    # refuses a message seen before, and one welcome can reach two sockets.
    def session():
        return Session(key=key, signature_scheme=ci["signature_scheme"])

    everything = sub(b"")          # "" is subscribed already (the client's own)
    time.sleep(0.5)                # connected before the next one subscribes
    first = sub(TOPIC)             # a new topic: welcomed
    got_all = welcomes(everything, session(), 2.0)
    got_first = welcomes(first, session(), 0.5)
    second = sub(TOPIC)            # the same topic again: not welcomed
    time.sleep(0.5)
    got_second = welcomes(second, session(), 1.0)
    h.note(all=len(got_all), first=len(got_first), second=len(got_second))

    if not speaks:
        h.check(not got_all and not got_first and not got_second,
                "a kernel without welcomes: welcomes were seen %s" % [m["content"] for _, m in got_all + got_first])
    else:
        subs_first = [m["content"]["subscription"] for _, m in got_first]
        h.check(subs_first == [TOPIC.decode()], "the new topic's subscriber got %s, want one welcome for it" % subs_first)
        idents, m = got_first[0]
        h.check(idents == [TOPIC], "the welcome's topic frame is %s" % idents)
        h.check(m["parent_header"] == {}, "the welcome has a parent: %s" % m["parent_header"])
        # The "" subscriber sees the new topic's welcome (PUB semantics, as
        # from the bare kernel) and nothing for "" itself: that was welcomed
        # when the kernel started, and the relay's own welcome is kept back.
        subs_all = [m["content"]["subscription"] for _, m in got_all]
        h.check(subs_all == [TOPIC.decode()], "the \"\" subscriber got welcomes %s" % subs_all)
        h.check(not got_second, "a second subscriber of the topic was welcomed: %s" % [m["content"] for _, m in got_second])
    for s in (everything, first, second):
        s.close(linger=0)
    ctx.term()
    h.assert_answers(kc)
    km.shutdown_kernel()


h.run(main)
