"""Gantt charts of pipeline schedules: the planner's or measured ones.

    tern.gantt.draw(trace, "out.svg")     # or "out.png" (matplotlib)

trace: {"title", "stages", "iteration_ms", "events": [{"kind": "forward" |
"backward" | "activation" | "gradient", "stage", "micro", "start_ms",
"end_ms"}]}, as tern.planner.trace(model) returns it or as measured (a
transfer's stage is its sender).  The chart is libtern_planner's, the one
`tern-plan schedule --gantt` writes (src/planner/gantt.cc): an SVG, which
for a .png matplotlib paints as it is (tern._svg_to_png, a copy of
src/planner/svg_to_png.py), so both formats show the same picture.
"""
import json

from . import _charts, planner

__all__ = ["draw"]


def draw(trace, path):
    """Draws `trace` (a dict) to `path` (.svg or .png)."""
    _charts.check_path(path)
    _charts.save(planner._call("ternPlanTraceSvg", json.dumps(trace).encode()), path)
