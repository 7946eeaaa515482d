"""Raw ZMTP 3.0 (NULL mechanism) for the attack scenarios: the bytes a
peer without the key can send, standard library only (peers_attack.py runs
it as another user with Debian's Python)."""

import struct

GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
assert len(GREETING) == 64


def frame(body, more=False, command=False):
    flags = (0x01 if more else 0) | (0x04 if command else 0)
    if len(body) > 255:
        return bytes([flags | 0x02]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def message(*frames):
    return b"".join(frame(f, more=i < len(frames) - 1) for i, f in enumerate(frames))


def prop(name, value):
    return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value


def ready(sock_type, identity=None):
    body = b"\x05READY" + prop(b"Socket-Type", sock_type)
    if identity is not None:
        body += prop(b"Identity", identity)
    return frame(body, command=True)
