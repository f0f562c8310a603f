"""Measure and re-plan (docs/DESIGN.md, "kFkB pipeline planner").

At each batch boundary every stage contributes what it measured in the
batch just run (forward and backward time, its outgoing link's bandwidth and
latency from a ping-pong probe, its first start and last end); the
coordinator (stage 0) builds the planner's model JSON from them, asks
tern.planner, and decides the (m, K) of the next batch.

Compute time is not proportional to samples: every micro-batch pays a fixed
cost (Python, torch dispatch, the receive path) beside its per-sample work,
and docs/DESIGN.md's model has only a per-sample figure.  So each stage
calibrates both parts once (one micro-batch of 1 sample and one of the whole
batch, `Stage.time_compute`), re-measures the per-sample part from every
batch it runs, and the coordinator gives the planner one model per split m,
with per-sample times c1 + c0 / (batch / m) that are right at that split;
the planner picks K (and max_k) for each m and the fastest m wins.  With
one model for every split, the planner would favour micro-batches of one
sample, whose fixed costs it cannot see.

- with planning on, it re-plans at the first boundary and whenever a link's
  measured bandwidth differs from the one the current plan assumed by more
  than `replan_threshold` (a competing flow, a `tc` rate change);
- either way it predicts the next batch's iteration time for the (m, K) it
  will run, with the model just measured, so predicted and measured times
  can be compared batch by batch.
Each decision is logged with the predicted and the measured times.
"""
import os
import statistics

from .. import planner

SMOOTH = 3  # probes per link a decision looks at (their median)
# A re-plan keeps the current (m, K) unless the planner's pick is predicted at
# least this much faster: predictions are 0.85-1.15x the measured time here,
# so a smaller predicted gain is noise, and swapping on it only churns (after
# a 1 -> 0.1 Gbit/s drop at batch 32, swaps predicted 2-7% faster measured
# 0.93-1.06x; those predicted 25-61% faster, 1.34-1.93x).
MIN_GAIN = 0.10

# One stage's measurement vector (gathered as float64 over tern).
FIELDS = ("fwd_fixed_ms", "fwd_ms_per_sample", "bwd_fixed_ms", "bwd_ms_per_sample",
          "link_gbps", "link_latency_us", "background_cores", "cpu_s", "host_busy_s", "start", "end")
HOST_WINDOW = 5  # batches whose host CPU is summed (/proc/stat counts in 10 ms ticks)


def machine_memory():
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def model_json(cfg, partition, rows, m, cores=0):
    """docs/DESIGN.md's model.json, right for m micro-batches, from the stages'
    measurements (rows: one dict per stage); `cores` > 0: the stages share
    that many cores (the planner's processor-sharing model)."""
    memory = cfg.memory_bytes or machine_memory()
    act = cfg.width * 4  # float32 activations
    size = cfg.batch // m
    stages = []
    for n, row in zip(partition, rows):
        stages.append({"fwd_ms_per_sample": max(row["fwd_ms_per_sample"] + row["fwd_fixed_ms"] / size, 1e-6),
                       "bwd_ms_per_sample": max(row["bwd_ms_per_sample"] + row["bwd_fixed_ms"] / size, 1e-6),
                       # autograd keeps each layer's input and relu output per sample
                       "activation_bytes_per_sample": 2 * n * act,
                       "output_bytes_per_sample": act,
                       "static_bytes": 2 * n * (cfg.width + 1) * cfg.width * 4,  # weights and gradients
                       "memory_bytes": memory})
        if cores:
            stages[-1]["background_cores"] = row.get("background_cores", 0.0)
    links = [{"bandwidth_gbps": max(r["link_gbps"], 1e-6), "latency_us": max(r["link_latency_us"], 0.0)}
             for r in rows[:-1]]
    model = {"batch_size": cfg.batch, "stages": stages, "network": links}
    if cores:
        model["cores"] = cores
    return model


class Replanner:
    def __init__(self, cfg, cores=0):
        self.cfg = cfg
        self.cores = cores         # > 0: the stages share this many cores (runtime._shared_cores)
        self.planned_gbps = None   # the link bandwidths the current plan assumed
        self.decisions = []
        self.history = []          # the last SMOOTH boundaries' probes, per link
        self.host_history = []     # the last HOST_WINDOW batches' (host busy, stages' CPU, wall) seconds

    def decide(self, iteration, partition, rows, current, forced=None):
        """(m, K, predicted ms) of the batch after `iteration`; `forced` (m, K)
        overrides the choice (a sweep), the planner's pick is still logged."""
        m, k = current
        rows = self._with_host_load(self._smoothed(rows))
        network = model_json(self.cfg, partition, rows, m, self.cores)["network"]
        gbps = [link["bandwidth_gbps"] for link in network]
        measured_ms = (max(r["end"] for r in rows) - min(r["start"] for r in rows)) * 1e3
        reason = self._reason(gbps)
        entry = None
        if reason:
            candidates = self.candidates(partition, rows)
            entry = {"iteration": iteration, "reason": reason, "bandwidth_gbps": gbps,
                     "latency_us": [link["latency_us"] for link in network],
                     "old": [m, k], "measured_ms": measured_ms, "cores": self.cores,
                     "predicted_old_ms": self.predict(partition, rows, m, k), "candidates": candidates,
                     "rows": rows}
            feasible = [c for c in candidates if c["feasible"]]
            if feasible:
                best = min(feasible, key=lambda c: c["iteration_ms"])
                entry["pick"] = [best["microbatches"], best["k"]]
                gain = 1 - best["iteration_ms"] / entry["predicted_old_ms"]
                if self.planned_gbps is not None and entry["pick"] != [m, k] and gain < MIN_GAIN:
                    entry["kept"] = (f"the current (m, K) is predicted within {MIN_GAIN:.0%} of the planner's "
                                     f"pick {entry['pick']} ({max(gain, 0):.1%} slower): kept")
                else:
                    m, k = entry["pick"]
            else:
                entry["pick"] = [m, k]
            self.planned_gbps = gbps
        if forced:
            m, k = forced
        predicted = self.predict(partition, rows, m, k)
        if entry is not None:
            entry.update({"new": [m, k], "predicted_new_ms": predicted})
            self.decisions.append(entry)
        return m, k, predicted

    def _smoothed(self, rows):
        """The rows with each link's bandwidth and latency the median of its
        last SMOOTH probes: one ping-pong on a loaded host can read 10x off
        either way, a real change persists (it is acted on one batch later)."""
        self.history.append([(r["link_gbps"], r["link_latency_us"]) for r in rows])
        del self.history[:-SMOOTH]
        out = []
        for s, row in enumerate(rows):
            row = dict(row)
            row["link_gbps"] = statistics.median(h[s][0] for h in self.history)
            row["link_latency_us"] = statistics.median(h[s][1] for h in self.history)
            out.append(row)
        return out

    def _with_host_load(self, rows):
        """With shared cores: the host's busy CPU that no stage's process
        accounts for (the kernel's network stack between namespaces, other
        jobs) added to the stages' background load, evenly.  4 stages over tcp
        between namespaces ran 0.74-0.96x the predicted time without it."""
        if not self.cores:
            return rows
        busy = statistics.median(r["host_busy_s"] for r in rows)
        wall = max(r["end"] for r in rows) - min(r["start"] for r in rows)
        self.host_history = (self.host_history + [(busy, sum(r["cpu_s"] for r in rows), wall)])[-HOST_WINDOW:]
        extra = sum(b - c for b, c, _ in self.host_history) / max(sum(w for _, _, w in self.host_history), 1e-9)
        share = max(extra, 0.0) / len(rows)
        return [dict(r, background_cores=r["background_cores"] + share, host_extra_cores=max(extra, 0.0))
                for r in rows]

    def _reason(self, gbps):
        if not self.cfg.plan:
            return None
        if self.planned_gbps is None:
            return "first measurement"
        for link, (now, then) in enumerate(zip(gbps, self.planned_gbps)):
            if abs(now - then) > self.cfg.replan_threshold * then:
                return f"link {link} bandwidth {then:.4g} -> {now:.4g} Gbit/s"
        return None

    def candidates(self, partition, rows):
        """The planner's candidate for every split m (its K, max_k and time),
        each planned with the model measured for that split."""
        out = []
        for m in divisors(self.cfg.batch):
            c = planner.schedule(model_json(self.cfg, partition, rows, m, self.cores),
                                 microbatches=m)["candidates"][0]
            out.append({k: c[k] for k in ("microbatches", "k", "max_k", "iteration_ms", "feasible")})
        return out

    def predict(self, partition, rows, m, k):
        """The planner's iteration time for running (m, K) next."""
        return planner.trace(model_json(self.cfg, partition, rows, m, self.cores),
                             microbatches=m, k=k)["iteration_ms"]
