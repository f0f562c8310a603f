"""perf/compare's peers across network namespaces: OpenMPI's ranks run one per
namespace (mpirun as host 0, the other daemons started through perf/netns_agent)
and their messages cross the veth links, as tern's and Gloo's do."""
import importlib.machinery
import json
import os
import subprocess
import sys

import pytest

PERF = os.path.join(os.path.dirname(__file__), "..", "..", "perf")
BUILD = os.environ.get("TERN_BUILD_DIR", os.path.join(PERF, "..", "build"))
compare = importlib.machinery.SourceFileLoader("compare", os.path.join(PERF, "compare")).load_module()

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for ip netns")


def rx_bytes(netns, i):
    out = subprocess.run(["ip", "netns", "exec", netns.ns(i), "cat", "/sys/class/net/h%d/statistics/rx_bytes" % i],
                         capture_output=True, text=True, check=True).stdout
    return int(out)


@needs_root
def test_openmpi_ranks_run_one_per_namespace_over_the_links():
    compare.cleanup_stale("ternpeer")
    netns = compare.Netns(3, "", prefix="ternpeer")
    try:
        args = compare.argparse.Namespace(build=BUILD, coll="all_reduce", b="1M", e="1M", f=2, n=4, w=1,
                                          mpi_btl="")
        before = [rx_bytes(netns, i) for i in range(3)]
        out = compare.run_mpi(args, 3, netns=netns)
        after = [rx_bytes(netns, i) for i in range(3)]
    finally:
        netns.close()
    # Each rank names the host it ran on: its namespace's address.
    for r, addr in enumerate(netns.addrs):
        assert ("Rank  %d" % r) in out and (" on %s " % addr) in out, out
    rows = compare.parse_rows(out)
    assert 1 << 20 in rows and rows[1 << 20][1] > 0, out
    # A 3-rank ring allreduce of 1 MiB, 5 times, moves at least 4/3 MiB into
    # each rank per call: it crossed the veth links, not shared memory.
    assert all(a - b > 5 * (4 << 20) // 3 for a, b in zip(after, before)), (before, after)


@needs_root
def test_compare_across_namespaces_has_an_openmpi_column(tmp_path):
    js = tmp_path / "cmp.json"
    r = subprocess.run([sys.executable, os.path.join(PERF, "compare"), "--build", BUILD, "--netns",
                        "--ranks", "2", "-b", "256K", "-e", "1M", "-f", "4", "-n", "2", "-w", "1",
                        "--transport", "tcp", "--peers", "openmpi,gloo", "--json", str(js)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OpenMPI btl=tcp,self" in r.stdout, r.stdout
    res = json.loads(js.read_text())["results"]["2"]
    assert set(res["groups"]) >= {"tern", "openmpi", "gloo"}, res["groups"]
    assert all(float(v[1]) > 0 for v in res["rounds"][0]["openmpi"].values()), res
    # every round carries the host's phase: core_pingpong's one-way ns before and after it
    assert len(res["phase_ns"]) == len(res["rounds"]) and all(0 < ns < 10000 for p in res["phase_ns"] for ns in p)
    assert "core_pingpong one-way ns before/after each round" in r.stdout, r.stdout
    # and the gap between the host's CPUs (build/perf/cpu_speed: slowest over fastest)
    assert len(res["cpu_gap"]) == len(res["rounds"]) and all(1.0 <= g < 10 for p in res["cpu_gap"] for g in p), res
    assert "slowest CPU over fastest (build/perf/cpu_speed) before/after each round" in r.stdout, r.stdout
    doc = json.loads(js.read_text())
    assert doc["written"] == 0 and doc["registered"] == 0, doc


def test_rounds_split_by_the_hosts_phase(capsys):
    """A round is fast or slow by core_pingpong before and after it (mixed when it
    flipped); with both kinds the table comes again per phase, from their rounds only."""
    assert [compare.phase_of(b, e) for b, e in [(60, 70), (250, 260), (60, 250), (None, 60)]] == \
        ["fast", "slow", "mixed", None]
    one = lambda t: {"tern": {1 << 20: (t, 1.0 / t, "default")}, "gloo": {1 << 20: (2.0, 0.5, "default")}}
    rounds, phases = [one(1.0), one(4.0), one(2.0)], [(60, 70), (250, 260), (60, 250)]
    compare.print_phases(2, rounds, phases, compare.phase_tables(rounds, phases, "tern", ["gloo"]), "tern")
    out = capsys.readouterr().out
    fast, slow = out.split("# fast phase only (1 of 3 rounds):")[1].split("# slow phase only (1 of 3 rounds):")
    assert "2.00x" in fast and "0.50x" in slow, out  # each from its own round: 2/1 and 2/4


def test_json_speedups_per_phase_and_their_plots(tmp_path):
    """The JSON keeps tern's per-round speed-up over the best peer for every round and per
    phase (a flipped round in neither), and both plots draw from it: one busbw panel per
    phase, and the speed-up of several collectives in one phase."""
    one = lambda t: {"tern": {1 << 20: (t, 1.0 / t, "default")}, "gloo": {1 << 20: (2.0, 0.5, "default")}}
    rounds, phases = [one(1.0), one(4.0), one(2.0), one(8.0)], [(60, 70), (250, 260), (60, 250), (270, 280)]
    sp = compare.speedups(compare.phase_tables(rounds, phases, "tern", ["gloo"]))
    assert sp["all"][str(1 << 20)] == {"ratios": [2.0, 0.5, 1.0, 0.25], "best": "gloo"}
    assert sp["fast"][str(1 << 20)]["ratios"] == [2.0] and sp["slow"][str(1 << 20)]["ratios"] == [0.5, 0.25]
    for coll in ("broadcast", "reduce"):
        res = {"groups": ["tern", "gloo"], "phase_ns": phases, "phases": [compare.phase_of(*p) for p in phases], "speedups": sp,
               "rounds": [{g: {str(s): v for s, v in col.items()} for g, col in rd.items()} for rd in rounds]}
        json.dump({"coll": coll, "where": "one host", "results": {"2": res}}, open(tmp_path / (coll + ".json"), "w"))
    plot = importlib.machinery.SourceFileLoader("plot_compare", os.path.join(PERF, "plot_compare.py")).load_module()
    cells = plot.panels(json.load(open(tmp_path / "broadcast.json"))["results"])
    assert [(n, title) for n, title, _, _ in cells] == [("2", "fast phase, 1 of 4 rounds, 60-70 ns one way"),
                                                        ("2", "slow phase, 2 of 4 rounds, 250-280 ns one way")]
    assert [len(r) for _, _, r, _ in cells] == [1, 2]
    res = json.load(open(tmp_path / "broadcast.json"))["results"]["2"]
    res["phases"] = ["mixed", "slow", "mixed", "slow"]
    assert [(t, len(r)) for _, t, r, _ in plot.panels({"2": res})] == [("slow phase, 2 of 4 rounds, 250-280 ns one way", 2)]
    res["phases"] = ["mixed"] * 4
    assert [(t, len(r)) for _, t, r, _ in plot.panels({"2": res})] == [("", 4)]
    out = tmp_path / "slow.png"
    subprocess.run(["/usr/bin/python3", os.path.join(PERF, "plot_phase_ratios.py"), "--phase", "slow", str(out),
                    str(tmp_path / "broadcast.json"), str(tmp_path / "reduce.json")], check=True)
    assert out.stat().st_size > 10000
