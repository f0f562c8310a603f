"""Chart files: the planner library's SVG written as it is, or painted as PNG.

Both tern.planner.gantt and tern.gantt.draw write through here; it imports
neither, so neither imports the other for it.
"""


def check_path(path):
    if not str(path).endswith((".svg", ".png")):
        raise ValueError("the gantt path must end in .svg or .png.")


def save(svg, path):
    """Writes the library's SVG chart to `path`, painted as PNG for a .png
    (tern._svg_to_png, a copy of src/planner/svg_to_png.py)."""
    check_path(path)
    if str(path).endswith(".png"):
        from ._svg_to_png import convert
        convert(svg, path)
        return
    with open(path, "w") as f:
        f.write(svg)
