#!/usr/bin/env python3
"""Draw docs/img/gpu-restart.svg from the samples TestE2EFigureGPURestart
wrote (docs/img/gpu-restart.json; docs/img/gpu-restart.sh does both).

    python3 docs/img/gpu-restart.py IN.json OUT.svg

One panel per run (stock ipykernel above, tfgpu below), on one time axis
whose zero is the moment Restart was asked: GPU memory as NVML listed it,
stacked by who held it (the kernel, its escaped worker, the new kernel),
with the Restart and the new kernel's ready marked. Stdlib only, so
anyone with a Python 3 can redraw it; the SVG has a viewBox and a white
background, so GitHub shows it alike in light and dark mode.
"""

import json
import math
import sys
from xml.sax.saxutils import escape

W, H = 800, 420
PLOT_X0, PLOT_X1 = 74, 588  # the plots' left and right edges
NOTE_X = 608  # the column that says what each panel shows
PANEL_TOPS = (96, 234)
PANEL_H = 112
FONT = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Helvetica, Arial, sans-serif"

INK, MUTED, GRID = "#1f2328", "#59636e", "#d8dee4"
# Who holds the memory, stacked from the bottom: the worker first, so the
# memory it strands stays the floor of the stock panel after the Restart.
LAYERS = (
    ("worker_mib", "escaped worker", "#d1495b"),
    ("kernel_mib", "kernel", "#3d7cc9"),
    ("new_kernel_mib", "new kernel", "#2a9d8f"),
    ("other_mib", "other", "#8c959f"),
)
RESTART_COLOR, READY_COLOR = "#59636e", "#2a9d8f"


def gib(mib):
    v = mib / 1024
    return ("%d" % v if v == int(v) else "%.1f" % v) + " GiB"


def text(x, y, s, size=12, color=INK, anchor="start", weight="normal", extra=""):
    return ('<text x="%.1f" y="%.1f" font-size="%g" fill="%s" text-anchor="%s" font-weight="%s"%s>%s</text>'
            % (x, y, size, color, anchor, weight, extra, escape(s)))


def steps(ts, vs):
    """A step function as (start, end, value) runs of equal value: sample i
    holds from ts[i] to ts[i+1]."""
    runs = []
    for i, v in enumerate(vs):
        end = ts[i + 1] if i + 1 < len(ts) else ts[i]
        if runs and runs[-1][2] == v:
            runs[-1][1] = end
        else:
            runs.append([ts[i], end, v])
    return runs


class Panel:
    def __init__(self, run, top, x_of, y_max):
        self.run, self.top, self.x_of = run, top, x_of
        self.bottom = top + PANEL_H
        self.y_max = y_max
        cols = run["columns"]
        restart = run["marks"]["restart"]
        self.ts = [s[0] - restart for s in run["samples"]]
        self.col = {name: [s[cols.index(name)] for s in run["samples"]] for name in cols[1:]}
        self.marks = {k: v - restart for k, v in run["marks"].items()}

    def y_of(self, mib):
        return self.bottom - mib / self.y_max * PANEL_H

    def held(self, i):
        return sum(self.col[name][i] for name, _, _ in LAYERS)

    def at(self, mark):
        """The index of the first sample at or after mark."""
        for i, t in enumerate(self.ts):
            if t >= self.marks[mark]:
                return i
        return len(self.ts) - 1

    def draw(self):
        out = []
        # Grid and y ticks every 2 GiB.
        for g in range(0, int(self.y_max / 1024) + 1, 2):
            y = self.y_of(g * 1024)
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>'
                       % (PLOT_X0, PLOT_X1, y, y, GRID if g else MUTED))
            out.append(text(PLOT_X0 - 8, y + 4, "%d" % g, 11, MUTED, "end"))
        # The stacked areas, each a polygon between its step boundaries.
        below = [0] * len(self.ts)
        for name, _, color in LAYERS:
            vals = self.col[name]
            if not any(vals):
                continue
            above = [b + v for b, v in zip(below, vals)]
            up = [(self.x_of(a), self.y_of(v)) for s, e, v in steps(self.ts, above) for a in (s, e)]
            down = [(self.x_of(a), self.y_of(v)) for s, e, v in reversed(steps(self.ts, below)) for a in (e, s)]
            d = "M" + " L".join("%.1f,%.1f" % p for p in up + down) + " Z"
            out.append('<path d="%s" fill="%s" fill-opacity="0.9"/>' % (d, color))
            below = above
        # The total NVML listed, as a step line over the areas.
        total = [self.held(i) for i in range(len(self.ts))]
        pts = [(self.x_of(a), self.y_of(v)) for s, e, v in steps(self.ts, total) for a in (s, e)]
        out.append('<path d="M%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round"/>'
                   % (" L".join("%.1f,%.1f" % p for p in pts), INK))
        # Restart and ready, labelled away from each other.
        for mark, label, color, anchor, dx in (("restart", "Restart", RESTART_COLOR, "end", -5),
                                                ("ready", "new kernel ready", READY_COLOR, "start", 5)):
            x = self.x_of(self.marks[mark])
            out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="1.4" stroke-dasharray="5 4"/>'
                       % (x, x, self.top - 6, self.bottom, color))
            out.append(text(x + dx, self.top - 1, label, 11.5, color, anchor, "600"))
        out += self.band_labels()
        return out

    def band_labels(self):
        """Name each band where it is wide and tall enough to hold its name."""
        out = []
        below = [0] * len(self.ts)
        for name, label, _ in LAYERS:
            vals = self.col[name]
            for s, e, v in steps(self.ts, vals):
                if v <= 0:
                    continue
                # This band's bottom over the run: take it where it is constant.
                i0 = next(i for i, t in enumerate(self.ts) if t >= s)
                base = below[i0]
                w = self.x_of(e) - self.x_of(s)
                h = v / self.y_max * PANEL_H
                s_label = "%s %s" % (label, gib(v))
                if w > len(s_label) * 6.6 + 10 and h >= 16:
                    out.append(text(self.x_of(s) + w / 2, self.y_of(base + v / 2) + 4, s_label, 11.5,
                                    "#ffffff", "middle", "600"))
            below = [b + v for b, v in zip(below, vals)]
        return out


def notes(p, wrapped, y):
    """What the panel shows, in words, from the samples."""
    ready = p.held(p.at("ready"))
    end = p.held(len(p.ts) - 1)
    name = p.run["label"]
    out = [text(NOTE_X, y, name, 14, INK, weight="700")]
    if wrapped:
        out.append(text(NOTE_X, y + 22, "when the new kernel is ready:", 11.5, MUTED))
        out.append(text(NOTE_X, y + 42, "%s held" % gib(ready), 16, READY_COLOR, weight="700"))
        out.append(text(NOTE_X, y + 60, "the old tree was killed and", 11.5, MUTED))
        out.append(text(NOTE_X, y + 76, "NVML confirmed its memory free", 11.5, MUTED))
    else:
        stranded = p.col["worker_mib"][-1]
        out.append(text(NOTE_X, y + 22, "when the new kernel is ready:", 11.5, MUTED))
        out.append(text(NOTE_X, y + 42, "%s still held" % gib(ready), 16, LAYERS[0][2], weight="700"))
        out.append(text(NOTE_X, y + 60, "by the old kernel's worker;", 11.5, MUTED))
        out.append(text(NOTE_X, y + 76, "%s after the re-run" % gib(end), 11.5, MUTED))
    return out


def draw(fig):
    runs = fig["runs"]
    lo = min(s[0] - r["marks"]["restart"] for r in runs for s in r["samples"])
    hi = max(s[0] - r["marks"]["restart"] for r in runs for s in r["samples"])
    x_lo, x_hi = lo, hi + 0.1  # room for the last step's end
    x_of = lambda t: PLOT_X0 + (t - x_lo) / (x_hi - x_lo) * (PLOT_X1 - PLOT_X0)
    most = max(sum(s[1:]) for r in runs for s in r["samples"])
    y_max = (math.ceil(most / 1024) + 1) * 1024  # headroom over the highest step

    out = ['<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="%s">'
           % (W, H, W, H, escape(FONT, {'"': "&quot;"})),
           "<title>GPU memory across a Jupyter kernel Restart: stock ipykernel and TF-GPU (clean restart)</title>",
           '<rect width="%d" height="%d" rx="10" fill="#ffffff"/>' % (W, H),
           text(24, 32, "GPU memory across a Jupyter kernel Restart", 19, INK, weight="700"),
           text(24, 53, "A cell holds %s in the kernel and %s in a worker that left its process group (setsid);"
                % (gib(fig["kernel_mib"]), gib(fig["worker_mib"])), 12.5, MUTED),
           text(24, 70, "then Restart, and once the new kernel is ready the cell runs again.", 12.5, MUTED)]
    for run, top in zip(runs, PANEL_TOPS):
        p = Panel(run, top, x_of, y_max)
        out += p.draw()
        out += notes(p, run["kernel"] != "python3", top + 14)
    # The shared time axis, under the last panel.
    bottom = PANEL_TOPS[-1] + PANEL_H
    for t in range(math.ceil(x_lo), math.floor(x_hi) + 1):
        x = x_of(t)
        out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s"/>' % (x, x, bottom, bottom + 4, MUTED))
        out.append(text(x, bottom + 17, "%+d s" % t if t else "0", 11, MUTED, "middle"))
    out.append(text((PLOT_X0 + PLOT_X1) / 2, bottom + 35, "time since Restart was asked", 12, MUTED, "middle"))
    mid = (PANEL_TOPS[0] + bottom) / 2
    out.append(text(24, mid, "GPU memory used (GiB)", 12, MUTED, "middle",
                    extra=' transform="rotate(-90 %d %.1f)"' % (24, mid)))
    ver = runs[0]
    out.append(text(24, H - 12, "Measured %s (%d CPUs) with a fake NVML: no GPU, memory freed %d ms after its process dies; "
                    "jupyter_client %s, ipykernel %s." % (fig["measured"], fig["cpus"], fig["release_ms"],
                                                         ver["jupyter_client"], ver["ipykernel"]), 10, MUTED))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: gpu-restart.py IN.json OUT.svg")
    with open(argv[1]) as f:
        fig = json.load(f)
    svg = draw(fig)
    with open(argv[2], "w") as f:
        f.write(svg)
    for run in fig["runs"]:
        cols = run["columns"]
        last = run["samples"][-1]
        print("%s: %d samples, at the end %s" % (run["label"], len(run["samples"]),
              ", ".join("%s %d MiB" % (c, v) for c, v in zip(cols[1:], last[1:]) if v)))


if __name__ == "__main__":
    main(sys.argv)
