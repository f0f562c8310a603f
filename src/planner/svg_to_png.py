"""A PNG of libtern_planner's SVG gantt chart, painted by matplotlib.

    python3 svg_to_png.py OUT.png < chart.svg     # what `tern-plan schedule --gantt OUT.png` runs
    convert(svg_text, "out.png")                  # tern.gantt, through its copy tern._svg_to_png

The chart is laid out once, by gantt.cc; this paints what it laid out and
decides nothing: every <rect>, <line> and <text> directly under <svg>, each
with its look in its own attributes (gantt.h promises no other element and
no CSS), at the SVG's size in CSS pixels (96 to the inch).  Only the
standard library and matplotlib are imported: tern-plan runs this file on
its own, compiled in.
"""
import sys
import xml.etree.ElementTree as ET

PX_PER_INCH = 96
PT_PER_PX = 72 / PX_PER_INCH
DPI = 144  # 1.5 device pixels to an SVG pixel: text stays sharp
ANCHORS = {"start": "left", "middle": "center", "end": "right"}


def _num(element, name, default=0.0):
    return float(element.get(name, default))


def _rect(ax, e, z):
    from matplotlib.patches import Rectangle
    stroke = e.get("stroke")
    ax.add_patch(Rectangle((_num(e, "x"), _num(e, "y")), _num(e, "width"), _num(e, "height"),
                           facecolor=e.get("fill", "black"), edgecolor=stroke or "none",
                           linewidth=_num(e, "stroke-width", 1) * PT_PER_PX if stroke else 0, zorder=z))


def _line(ax, e, z):
    ax.plot([_num(e, "x1"), _num(e, "x2")], [_num(e, "y1"), _num(e, "y2")], color=e.get("stroke", "black"),
            linewidth=_num(e, "stroke-width", 1) * PT_PER_PX, solid_capstyle="butt", zorder=z)


def _text(ax, e, z):
    ax.text(_num(e, "x"), _num(e, "y"), e.text or "", ha=ANCHORS[e.get("text-anchor", "start")], va="baseline",
            fontsize=_num(e, "font-size", 16) * PT_PER_PX, fontweight=e.get("font-weight", "normal"),
            color=e.get("fill", "black"), family="sans-serif", zorder=z)


PAINTERS = {"rect": _rect, "line": _line, "text": _text}


def convert(svg, path):
    """Writes the PNG of `svg` (the text of a gantt.cc chart) to `path`."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend stays as it was
    root = ET.fromstring(svg)
    width, height = _num(root, "width"), _num(root, "height")
    fig = Figure(figsize=(width / PX_PER_INCH, height / PX_PER_INCH))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)  # SVG's y grows downwards
    ax.axis("off")
    for z, e in enumerate(root):  # SVG paints in document order; matplotlib by zorder
        tag = e.tag.rpartition("}")[2]
        if tag not in PAINTERS:
            raise ValueError(f"the gantt SVG has a <{tag}>, which this converter does not paint.")
        PAINTERS[tag](ax, e, z)
    fig.savefig(path, dpi=DPI)


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: svg_to_png.py OUT.png < chart.svg")
    try:
        import matplotlib  # noqa: F401  (say so plainly when it is missing)
    except ImportError:
        sys.exit(f"{sys.executable} has no matplotlib (Debian: apt-get install python3-matplotlib); "
                 "an .svg gantt needs nothing.")
    convert(sys.stdin.read(), argv[1])


if __name__ == "__main__":
    main(sys.argv)
