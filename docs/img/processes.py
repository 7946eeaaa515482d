#!/usr/bin/env python3
"""Draw docs/img/processes.svg from the capture TestE2EFigureProcesses
wrote (docs/img/processes.json; docs/img/processes.sh does both).

    python3 docs/img/processes.py IN.json OUT.svg

One panel per moment (a kernel running with its spare waiting, above; the
same kernel after a Restart, below): the Jupyter server on top and each
process of the kernel as a box under its parent, as `ps f` would nest
them, with its role as root's `tfgpu-kernel ps --json` gives it in bold
and its command line as `ps -o args` showed it, paths and ids shortened
here (the JSON keeps them whole). Each cgroup of the kernel's is a dashed
region around the processes in it; a process whose role changed across
the Restart says what it was, or what it becomes. Stdlib only, so anyone
with a Python 3 can redraw it; the SVG has a viewBox and a white
background, so GitHub shows it alike in light and dark mode.
"""

import json
import os
import re
import sys
from xml.sax.saxutils import escape

W = 960
X0 = 28  # the panels' left edge
RIGHT = W - 24  # their right edge
INDENT = 28  # per level of the tree
BOX_H, ROW = 36, 44  # a box, and the pitch of the rows
PANEL_HEAD = 34  # the panel's title, above its first row
FONT = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Helvetica, Arial, sans-serif"
MONO = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"
MONO_W = 6.6  # px per character of the 11 px monospace command lines
BOLD_W = 7.4  # px per character of the 12.5 px bold role names (about)
NOTE_W = 6.2  # px per character of the 11.5 px notes (about)

INK, MUTED, EDGE = "#1f2328", "#59636e", "#8c959f"
CHANGE = "#bf3989"  # what changed roles across the Restart
# Box fill and stroke by role: the launched process and its watchers gray,
# the kernel's tree blue, the spare's side green.
STYLE = {
    "jupyter server": ("#ffffff", "#1f2328"),
    "stub": ("#f6f8fa", "#8c959f"),
    "supervisor": ("#eaeef2", "#59636e"),
    "watcher": ("#f6f8fa", "#8c959f"),
    "kernel": ("#ddf4ff", "#3d7cc9"),
    "tree": ("#ddf4ff", "#3d7cc9"),
    "standby": ("#dafbe1", "#2a9d8f"),
    "standby-watcher": ("#f0fbf2", "#2a9d8f"),
    "spare": ("#dafbe1", "#2a9d8f"),
}
# A note beside a box, by role, where the role alone does not say it.
NOTES = {
    "jupyter server": "here the test's KernelManager, launching the kernelspec's argv",
    "stub": "forwards signals to the supervisor, exits with its code",
}

UUID = re.compile(r"\b([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def short(args):
    """A command line for the picture: the program's directory dropped,
    other absolute paths as …/NAME, kernel ids as their first 8 hex digits
    (record.ShortID)."""
    out = []
    for i, a in enumerate(args.split()):
        if a.startswith("/"):
            a = os.path.basename(a) if i == 0 else "…/" + os.path.basename(a)
        out.append(UUID.sub(r"\1", a))
    return " ".join(out)


def short_cgroup(path):
    """tfgpu-<uuid>-<pid> as tfgpu-<id8>…-<pid>."""
    return UUID.sub(lambda m: m.group(1) + "…", path)


def text(x, y, s, size=12, color=INK, anchor="start", weight="normal", family=None, extra=""):
    fam = ' font-family="%s"' % escape(family, {'"': "&quot;"}) if family else ""
    return ('<text x="%.1f" y="%.1f" font-size="%g" fill="%s" text-anchor="%s" font-weight="%s"%s%s>%s</text>'
            % (x, y, size, color, anchor, weight, fam, extra, escape(s)))


def rows_of(moment):
    """The processes in the order `ps f` nests them: the server's tree
    first, then each process whose parent is none of them (a standby
    that took over: its parent, the old supervisor, exited), each with
    its depth."""
    procs = moment["processes"]
    pids = {p["pid"] for p in procs}
    order = ["jupyter server", "stub", "supervisor", "watcher", "kernel", "tree", "standby", "standby-watcher", "spare"]
    kids = {}
    for p in procs:
        kids.setdefault(p["ppid"], []).append(p)
    out = []

    def walk(p, depth):
        out.append((p, depth))
        for c in sorted(kids.get(p["pid"], []), key=lambda c: (order.index(c["role"]) if c["role"] in order else 99, c["pid"])):
            walk(c, depth + 1)

    for p in procs:
        if p["ppid"] not in pids:
            walk(p, 0)
    return out


def changes(moments):
    """{(moment index, pid): note} for the pids whose role changed from
    one moment to the next: "was the R" after, "R after a Restart" before."""
    out = {}
    for i in range(1, len(moments)):
        before = {p["pid"]: p["role"] for p in moments[i - 1]["processes"]}
        for p in moments[i]["processes"]:
            was = before.get(p["pid"])
            if was and was != p["role"]:
                out[(i, p["pid"])] = "was the %s (pid %d)" % (was, p["pid"])
                out[(i - 1, p["pid"])] = "the %s after the Restart" % p["role"]
    return out


def box_width(p):
    return max(len(p["role"]) * BOLD_W, len(short(p["args"])) * MONO_W) + 20


def panel(moment, index, top, marks, cg_marks):
    """One moment's tree from top, with what changed roles (marks: by
    pid, cg_marks: by cgroup); returns its SVG and its bottom."""
    out = [text(X0, top + 16, moment["label"], 15, INK, weight="700"),
           text(X0 + len(moment["label"]) * 9.0 + 14, top + 16,
                "kernel %s · %d processes of the kernel's · containment %s"
                % (moment["kernel_id"][:8], len(moment["processes"]) - 1, moment["containment"]), 12, MUTED)]
    rows = rows_of(moment)
    geo = {}  # pid: (x, y, width)
    for i, (p, depth) in enumerate(rows):
        geo[p["pid"]] = (X0 + depth * INDENT, top + PANEL_HEAD + i * ROW, box_width(p))
    out += regions(moment, rows, geo, {cg: n for (i, cg), n in cg_marks.items() if i == index})
    # Parent → child: down from the parent's box, across to the child's.
    for p, _ in rows:
        if p["ppid"] in geo:
            px, py, _ = geo[p["ppid"]]
            x, y, _ = geo[p["pid"]]
            out.append('<path d="M%.1f,%.1f V%.1f H%.1f" fill="none" stroke="%s" stroke-width="1.3"/>'
                       % (px + 12, py + BOX_H, y + BOX_H / 2, x, EDGE))
    for p, _ in rows:
        x, y, w = geo[p["pid"]]
        fill, stroke = STYLE.get(p["role"], ("#ffffff", EDGE))
        out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%d" rx="6" fill="%s" stroke="%s" stroke-width="1.2"/>'
                   % (x, y, w, BOX_H, fill, stroke))
        out.append(text(x + 10, y + 15, p["role"], 12.5, INK, weight="700"))
        out.append(text(x + 10, y + 29, short(p["args"]), 11, INK, family=MONO))
        beside = []
        if (index, p["pid"]) in marks:
            beside.append((marks[(index, p["pid"])], CHANGE, "700"))
        note = NOTES.get(p["role"])
        if note and 20 + len(p["role"]) * BOLD_W + len(note) * NOTE_W <= w - 10:
            out.append(text(x + 20 + len(p["role"]) * BOLD_W, y + 15, note, 11.5, MUTED))  # on the role's line
        elif note:
            beside.append((note, MUTED, "normal"))
        if p["ppid"] not in geo and p["role"] != "jupyter server":
            beside.append(("re-parented: the supervisor that started it exited", MUTED, "normal"))
        for j, (s, color, weight) in enumerate(beside[:2]):
            out.append(text(x + w + 12, y + 15 + 14 * j, s, 11.5, color, weight=weight))
    return out, top + PANEL_HEAD + len(rows) * ROW


def whose_cgroup(roles):
    if "kernel" in roles:
        return "the kernel's cgroup"
    if "spare" in roles:
        return "the standby's cgroup, for its spare"
    return "a cgroup"


def cgroup_changes(moments):
    """{(moment index, cgroup): note} for the cgroups that were someone
    else's in the moment before."""
    out = {}
    for i in range(1, len(moments)):
        before = {}
        for p in moments[i - 1]["processes"]:
            before.setdefault(p["cgroup"], set()).add(p["role"])
        for cg, roles in before.items():
            now = {p["role"] for p in moments[i]["processes"] if p["cgroup"] == cg}
            if cg and now and whose_cgroup(now) != whose_cgroup(roles):
                out[(i, cg)] = "was %s" % whose_cgroup(roles).split(",")[0]
                out[(i - 1, cg)] = "becomes %s" % whose_cgroup(now).split(",")[0]
    return out


def regions(moment, rows, geo, was):
    """A dashed region around each run of rows in one cgroup of the
    kernel's, named for whose it is (and was, from was)."""
    out = []
    i = 0
    while i < len(rows):
        cg = rows[i][0]["cgroup"]
        j = i
        while j + 1 < len(rows) and rows[j + 1][0]["cgroup"] == cg:
            j += 1
        if cg:
            roles = {p["role"] for p, _ in rows[i : j + 1]}
            whose = whose_cgroup(roles)
            x = min(geo[p["pid"]][0] for p, _ in rows[i : j + 1]) - 8
            y0 = geo[rows[i][0]["pid"]][1] - 4
            y1 = geo[rows[j][0]["pid"]][1] + BOX_H + 4
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="8" fill="none" stroke="%s" stroke-width="1.3" stroke-dasharray="6 4"/>'
                       % (x, y0, RIGHT - x, y1 - y0, STYLE["kernel" if "kernel" in roles else "spare"][1]))
            out.append(text(RIGHT - 10, y1 - 8, "%s: %s" % (whose, short_cgroup(cg)), 11, MUTED, "end"))
            if cg in was:
                out.append(text(RIGHT - 10, y0 + 15, was[cg], 11.5, CHANGE, "end", "700"))
        i = j + 1
    return out


def draw(fig):
    moments = fig["moments"]
    marks, cg_marks = changes(moments), cgroup_changes(moments)
    body, top = [], 96
    for i, m in enumerate(moments):
        svg, bottom = panel(m, i, top, marks, cg_marks)
        body += svg
        top = bottom + 22
    h = top + 14
    out = ['<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="%s">'
           % (W, h, W, h, escape(FONT, {'"': "&quot;"})),
           "<title>One TF-GPU kernel's processes, with its spare waiting and after a Restart, as tfgpu-kernel ps names them</title>",
           '<rect width="%d" height="%d" rx="10" fill="#ffffff"/>' % (W, h),
           text(24, 32, "One kernel, its processes: running, and after a Restart", 19, INK, weight="700"),
           text(24, 53, "Each process in the role root's `tfgpu-kernel ps --json` gives it, with its command line as "
                "`ps -o args` shows it (paths and ids shortened);", 12.5, MUTED),
           text(24, 70, "dashed: the cgroups the kernel's processes are in. On Restart the standby becomes the supervisor "
                "and its spare the kernel.", 12.5, MUTED)]
    out += body
    out.append(text(24, h - 12, "Captured %s by TestE2EFigureProcesses (docs/img/processes.sh) as root: jupyter_client %s, "
                    "ipykernel %s, the spare on; pids as ps showed them." % (fig["measured"], fig["jupyter_client"], fig["ipykernel"]),
                    10, MUTED))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: processes.py IN.json OUT.svg")
    with open(argv[1]) as f:
        fig = json.load(f)
    svg = draw(fig)
    with open(argv[2], "w") as f:
        f.write(svg)
    for m in fig["moments"]:
        print("%s: %s" % (m["label"], ", ".join("%s %d" % (p["role"], p["pid"]) for p in m["processes"])))


if __name__ == "__main__":
    main(sys.argv)
