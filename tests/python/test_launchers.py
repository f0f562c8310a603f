"""tools/ternrun as a PyTorch launcher: it sets torch's launcher variables
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
besides tern's own, so the README's DDP example, which calls
dist.init_process_group("tern") with no arguments, runs under it unchanged;
and tern's own env init (ternCommInitFromEnv, tern.Comm.from_env) keeps
reading the TERN_ variables first when both sets are there.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TERNRUN = os.path.join(ROOT, "tools", "ternrun")
PY = "/usr/bin/python3"  # Debian's: torch belongs to it


def per_rank(out):
    """ternrun's rank-prefixed output lines, by rank."""
    lines = {}
    for line in out.splitlines():
        m = re.match(r"\[(\d+)\] (.*)", line)
        if m:
            lines.setdefault(int(m.group(1)), []).append(m.group(2))
    return lines


def ternrun(args, env=None, timeout=240, cwd=ROOT):
    return subprocess.run([TERNRUN, "--timeout", str(timeout - 30)] + args, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_ternrun_sets_torchrun_variables_beside_terns():
    n = 3
    env = dict(os.environ)
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env[v] = "stale"  # a launcher's variables from outside are replaced, not inherited
    show = ("import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k in "
            "('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')"
            " or k.startswith('TERN_')}))")
    p = ternrun(["-n", str(n), PY, "-c", show], env=env, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    envs = {r: json.loads(lines[0]) for r, lines in per_rank(p.stdout).items()}
    assert sorted(envs) == list(range(n)), p.stdout
    master_ports, roots, secrets = set(), set(), set()
    for r, e in envs.items():
        assert e["RANK"] == e["TERN_RANK"] == e["LOCAL_RANK"] == e["TERN_LOCAL_RANK"] == str(r), e
        assert e["WORLD_SIZE"] == e["TERN_NRANKS"] == e["LOCAL_WORLD_SIZE"] == e["TERN_LOCAL_SIZE"] == str(n), e
        host, port = e["TERN_ROOT"].rsplit(":", 1)
        assert e["MASTER_ADDR"] == host == "127.0.0.1", e
        # torch's store on MASTER_PORT; tern's root elsewhere, also off
        # MASTER_PORT+1 (where tern looks when TERN_ROOT is absent).
        assert int(port) not in (int(e["MASTER_PORT"]), int(e["MASTER_PORT"]) + 1), e
        assert 0 < int(e["MASTER_PORT"]) < 65536
        assert re.fullmatch(r"[0-9a-f]{32}", e["TERN_SECRET"]), e
        master_ports.add(e["MASTER_PORT"])
        roots.add(e["TERN_ROOT"])
        secrets.add(e["TERN_SECRET"])
    assert len(master_ports) == len(roots) == len(secrets) == 1  # one job


def test_ternrun_binds_each_rank_to_one_core():
    cpus = sorted(os.sched_getaffinity(0))
    show = "import os; print(sorted(os.sched_getaffinity(0)))"
    n = len(cpus) + 1  # one rank more than cores: the last shares the first's
    p = ternrun(["-n", str(n), "--bind-to", "core", PY, "-c", show], timeout=60)
    assert p.returncode == 0, p.stderr
    got = {r: json.loads(lines[0]) for r, lines in per_rank(p.stdout).items()}
    assert got == {r: [cpus[r % len(cpus)]] for r in range(n)}, got
    # Unbound (the default): every rank keeps every CPU ternrun may use.
    p = ternrun(["-n", "2", PY, "-c", show], timeout=60)
    assert p.returncode == 0, p.stderr
    assert all(json.loads(lines[0]) == cpus for lines in per_rank(p.stdout).values())


# Under ternrun: torch's env:// init and tern's env init in one process, both
# with no arguments; then with torch's variables made wrong, tern's env init
# still takes rank, size and root from TERN_* (a MASTER_ADDR nobody listens
# on would hang it until its timeout).
BOTH = r"""
import os, sys
import numpy as np
import torch, torch.distributed as dist
import tern, tern.torch
rank, n = int(os.environ["TERN_RANK"]), int(os.environ["TERN_NRANKS"])
dist.init_process_group("tern")
t = torch.ones(4) * (rank + 1)
dist.all_reduce(t)
assert dist.get_rank() == rank and dist.get_world_size() == n and t.tolist() == [n * (n + 1) / 2] * 4, t
comm = tern.Comm.from_env(timeout=20)
x = np.full(4, rank + 1.0)
comm.allreduce(x)
assert (comm.rank, comm.size) == (rank, n) and x.tolist() == [n * (n + 1) / 2] * 4, x
comm.destroy()
dist.destroy_process_group()
os.environ.update(RANK=str(n - 1 - rank), WORLD_SIZE=str(n + 5), MASTER_ADDR="192.0.2.1",
                  MASTER_PORT="9")
comm = tern.Comm.from_env(timeout=20)
x = np.full(4, 10.0 * (rank + 1))
comm.allreduce(x)
assert (comm.rank, comm.size) == (rank, n) and x.tolist() == [10 * n * (n + 1) / 2] * 4, x
comm.destroy()
print("ok", rank)
"""


def test_tern_env_init_reads_its_own_variables_first():
    p = ternrun(["-n", "2", PY, "-c", BOTH], timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert per_rank(p.stdout) == {0: ["ok 0"], 1: ["ok 1"]}, p.stdout + p.stderr


# Reads the DDP model's weights off the example's module when it exits
# (sitecustomize is imported by every interpreter on the path): the example
# runs as written, and the test still sees what each rank ended with.
DUMP = r"""
import atexit, json, os, sys

def _dump():
    main = sys.modules.get("__main__")
    DDP = sys.modules["torch.nn.parallel"].DistributedDataParallel  # KeyError: no torch
    models = [v for v in vars(main).values() if isinstance(v, DDP)]
    with open(os.path.join(os.environ["TERN_TEST_DUMP"], "rank%s.json" % os.environ["RANK"]), "w") as f:
        json.dump([[p.detach().reshape(-1).tolist() for p in m.parameters()] for m in models], f)

if "TERN_RANK" in os.environ:  # the ranks, not ternrun itself
    atexit.register(_dump)
"""


def test_readme_ddp_example_runs_under_ternrun(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(DUMP)
    env = dict(os.environ, TERN_TEST_DUMP=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(hook)] + [x for x in [os.environ.get("PYTHONPATH")] if x]))
    # Exactly the README's command.
    p = ternrun(["-n", "2", PY, "examples/torch_ddp.py"], env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = per_rank(p.stdout)
    losses = [float(m.group(1)) for m in (re.match(r"step 0: loss ([0-9.]+)$", l) for l in lines.get(0, [])) if m]
    final = [float(m.group(1)) for m in (re.match(r"final loss ([0-9.]+)$", l) for l in lines.get(0, [])) if m]
    assert len(losses) == 1 and len(final) == 1, p.stdout
    assert final[0] < 0.9 * losses[0], (losses, final)  # it trained
    w = [json.loads((tmp_path / ("rank%d.json" % r)).read_text()) for r in range(2)]
    assert len(w[0]) == 1 and len(w[0][0]) == 4, "one DDP model, two Linear layers"
    assert w[0] == w[1], "the ranks' weights differ after training"
