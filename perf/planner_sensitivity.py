"""How the kFkB planner's choice moves as the network slows (seed 001: a
larger K pays under contention).  One model, re-planned with
network_now = 100 ... 0.1 Gbit/s; prints a markdown table.

    PYTHONPATH=build/python /usr/bin/python3 perf/planner_sensitivity.py
"""
import tern.planner as planner

GiB, MiB = 1 << 30, 1 << 20
# 8 stages of a transformer-like model, stage 3 a little slower; activations
# kept 8 MiB a sample, 1 MiB a sample crosses each boundary; 2 GiB of memory
# left for activations (K is capped by memory for every split).
MODEL = {"batch_size": 512,
         "stages": [{"fwd_ms_per_sample": 0.20 * (1.25 if s == 3 else 1.0),
                     "bwd_ms_per_sample": 0.40 * (1.25 if s == 3 else 1.0),
                     "activation_bytes_per_sample": 8 * MiB, "output_bytes_per_sample": 1 * MiB,
                     "static_bytes": 4 * GiB, "memory_bytes": 6 * GiB} for s in range(8)],
         "network": {"bandwidth_gbps": 100.0, "latency_us": 20}}



def largest_fitting_k(m):
    """docs/DESIGN.md's memory rule at stage 0, the tightest here (8 groups in flight)."""
    st, p, batch = MODEL["stages"][0], len(MODEL["stages"]), MODEL["batch_size"]
    fits = [k for k in range(1, m + 1) if st["static_bytes"] + min(m, k * p) * (batch // m)
            * st["activation_bytes_per_sample"] <= st["memory_bytes"]]
    return max(fits)


def iteration_ms(gbps, m, k):
    return planner.trace(MODEL, network_now=gbps, microbatches=m, k=k)["iteration_ms"]


print("| bandwidth (Gbit/s) | best m | best K | iteration (ms) | same m, K = 1 (ms) | same m, largest K that fits (ms) |")
print("|---:|---:|---:|---:|---:|---:|")
for gbps in (100, 40, 10, 4, 1, 0.4, 0.1):
    best = planner.schedule(MODEL, network_now=gbps)["best"]
    m, kmax = best["microbatches"], largest_fitting_k(best["microbatches"])
    print(f"| {gbps:g} | {m} | {best['k']} | {best['iteration_ms']:.1f} | {iteration_ms(gbps, m, 1):.1f} "
          f"| {iteration_ms(gbps, m, kmax):.1f} (K = {kmax}) |")
