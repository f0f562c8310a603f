"""A stage's compute cost per micro-batch: fixed + per_sample x size.

docs/DESIGN.md's model has only a per-sample time, but every micro-batch also
pays a fixed cost (Python, torch dispatch, the receive path), so the
runtime keeps both parts and gives the planner, for each split m, the
per-sample time that is right at that micro-batch size (replan.py).

Both parts start from a calibration (`Stage.time_compute` at 1 sample and
at the whole batch) and are refitted from what the stage actually ran:
with ops of two or more sizes seen (a sweep, or a plan that changed m) a
least-squares line through each size's recent median; with one size, the
calibration stretched by the same factor in both parts until it gives that
size's op time.  A shared host stretches the whole op (the dispatch as much
as the arithmetic); keeping the calibrated fixed part and putting the rest
per sample made every extra micro-batch look too cheap, and after a link
drop the planner chose splits 2-8x finer that ran 11-22% slower than the
plan it had (perf/RESULTS.md, 2026-11-28).
"""
import statistics

KEEP = 5  # recent batches per micro-batch size


class Cost:
    def __init__(self, fixed_ms, per_sample_ms):
        self.calibrated = (fixed_ms, per_sample_ms)
        self.fixed, self.per_sample = fixed_ms, per_sample_ms
        self.seen = {}  # size -> recent median op ms

    @classmethod
    def calibrate(cls, one_ms, whole_ms, batch):
        """From one op of 1 sample and one of `batch` samples."""
        per_sample = max((whole_ms - one_ms) / (batch - 1), 1e-6) if batch > 1 else whole_ms
        return cls(max(one_ms - per_sample, 0.0), per_sample)

    def reset(self):
        """Forget what was measured (the stage's layers changed: a live
        migration); the calibration stays as the fixed part's bound."""
        self.seen = {}
        self.fixed, self.per_sample = self.calibrated

    def observe(self, size, median_op_ms):
        self.seen.setdefault(size, []).append(median_op_ms)
        del self.seen[size][:-KEEP]
        self._refit(size)

    def _refit(self, latest):
        points = [(s, statistics.median(v)) for s, v in self.seen.items()]
        if len(points) >= 2:
            n = len(points)
            mx = sum(s for s, _ in points) / n
            my = sum(t for _, t in points) / n
            sxx = sum((s - mx) ** 2 for s, _ in points)
            slope = sum((s - mx) * (t - my) for s, t in points) / sxx
            self.per_sample = max(slope, 1e-6)
            self.fixed = max(my - self.per_sample * mx, 0.0)
            return
        t = statistics.median(self.seen[latest])
        fixed, per_sample = self.calibrated
        stretch = t / max(fixed + per_sample * latest, 1e-9)
        self.fixed = fixed * stretch
        self.per_sample = max(per_sample * stretch, 1e-6)
