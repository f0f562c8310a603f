"""A CI-sized slice of PyTorch's own distributed suite (torch_suite.py) under
backend "tern": tests of ops tern's backend used to lack (gather, scatter,
allgather_coalesced, sparse allreduce, recv from any source, the barrier
timeout's error) and a DDP one.  Each must pass, not be skipped.  The whole
comparison with gloo: `torch_suite.py` (perf/RESULTS.md has the counts)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = ["test_gather", "test_scatter", "test_all_gather_coalesced_simple", "test_sparse_all_reduce_sum",
         "test_send_recv_any_source", "test_barrier_timeout_full_group", "test_all_gather_object_default_pg",
         "test_DistributedDataParallelCPU"]


def test_suite_slice_passes_under_tern(tmp_path):
    out = tmp_path / "result.json"
    regex = "^(%s)$" % "|".join(TESTS)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "torch_suite.py"), "--backends", "tern",
                           "--start", "fork", "--timeout", "90", "-k", regex, "--workdir", str(tmp_path),
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert out.exists(), proc.stdout + proc.stderr
    results = json.load(open(out))["results"]["tern"]
    assert sorted(results) == sorted(TESTS), sorted(results)
    bad = {n: r["status"] + ": " + r["detail"][-1500:] for n, r in results.items() if r["status"] != "pass"}
    assert not bad, "\n".join("%s %s" % kv for kv in bad.items())
