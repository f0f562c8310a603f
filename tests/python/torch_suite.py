#!/usr/bin/python3
"""PyTorch's own distributed test suite (torch 1.13's
torch.testing._internal.distributed.distributed_test, DistributedTest._DistTestBase),
world size 2, under gloo and under tern, compared test by test.

    PYTHONPATH=build/python /usr/bin/python3 tests/python/torch_suite.py [-k REGEX] [--backends gloo,tern]

It is run the way torch's test/distributed/test_distributed_spawn.py runs it
(that file is not installed by Debian): a TestCase built from TestDistBackend
and _DistTestBase, two ranks started per test (spawn; --start fork is quicker),
init_method file://, env BACKEND, WORLD_SIZE, TEMP_DIR, INIT_METHOD.

The suite picks its tests by backend name when it is imported (decorators like
skip_if(BACKEND != "gloo")).  Both runs import it as BACKEND=gloo, so tern
gets exactly the tests gloo gets; for tern, BACKEND is then set to "tern"
before any test runs (so init_process_group and every check in a test body
use tern), and "tern" joins the suite's plugin/ddp/subgroup feature sets.

Prints one line per test and backend, the counts, and the tests gloo passes
and tern does not; --json writes the same as a file.  Each backend runs in
its own python process (the suite reads BACKEND at import).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD_ENV = "TERN_SUITE_BACKEND"  # set in the per-backend process (and its ranks)


def _suite_class(backend, start):
    """The TestCase class for `backend` (imports the suite as gloo; see above)."""
    os.environ["BACKEND"] = "gloo"
    os.environ.setdefault("WORLD_SIZE", "2")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # As torch's run_test.py runs the file:// configuration (the suite reads
    # INIT_METHOD at import; test_barrier_timeout_global re-inits with it).
    os.environ.setdefault("INIT_METHOD", "file://" + os.path.join(tempfile.mkdtemp(), "init_file"))
    try:
        import expecttest  # noqa: F401 - torch's test utilities need it
    except ImportError:
        sys.path.append(os.path.join(HERE, "suite_shims"))
    argv, sys.argv[1:] = sys.argv[1:], []  # torch's common_utils parses sys.argv at import
    import torch
    import torch.distributed as dist
    from torch.testing._internal.common_distributed import DistTestCases
    from torch.testing._internal.distributed import distributed_test as dt
    sys.argv[1:] = argv

    # The suite's ranks turn on DDP's ReplicatedTensor mode, whose module
    # (torch.distributed._shard) cannot be imported under Debian's Python 3.11
    # (a dataclass with a mutable default): every DDP test failed under gloo
    # too.  Both backends run DDP in its default mode instead.
    import torch.nn.parallel._replicated_tensor_ddp_utils as replicated
    replicated._set_ddp_with_replicated_tensor = lambda enabled: None
    if backend != "gloo":
        import tern.torch  # noqa: F401 - registers the backend
        dt.BACKEND = backend
        for feature in ("plugin", "ddp", "subgroup"):
            DistTestCases.backend_feature[feature].add(backend)
        _cpu_branches_for(dt, backend)
    del dist

    class TestDistBackendWithSpawn(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            ctx = torch.multiprocessing.get_context(start)
            self._start_processes(ctx.Process)
            torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()

    # Spawned ranks unpickle TestDistBackendWithSpawn._run by this name.
    TestDistBackendWithSpawn.__qualname__ = "TestDistBackendWithSpawn"
    TestDistBackendWithSpawn.__module__ = __name__
    return TestDistBackendWithSpawn


def _cpu_branches_for(dt, backend):
    """A few helpers pick their CPU set-up with `BACKEND == "mpi" or BACKEND ==
    "gloo"` and leave the model undefined for any other backend; recompiled
    with `backend` added to that test, nothing else changed."""
    import inspect
    import textwrap
    base = dt.DistributedTest._DistTestBase
    cpu_test = 'BACKEND == "mpi" or BACKEND == "gloo"'
    for name, fn in list(vars(base).items()):
        if not callable(fn) or not name.startswith("_test"):
            continue
        src = textwrap.dedent(inspect.getsource(fn))
        if cpu_test not in src:
            continue
        code = {}
        exec(compile("\n" * (fn.__code__.co_firstlineno - 1) + src.replace(cpu_test, cpu_test + ' or BACKEND == "%s"' % backend),
                     dt.__file__, "exec"), dt.__dict__, code)
        setattr(base, name, code[name])


# Spawned ranks import this file as __mp_main__ and must find the class here.
if os.environ.get(CHILD_ENV):
    TestDistBackendWithSpawn = _suite_class(os.environ[CHILD_ENV], os.environ.get("TERN_SUITE_START", "spawn"))


class _Recorder(unittest.TextTestResult):
    """Writes one JSON line per finished test to the parent's pipe."""

    def __init__(self, out, *a, **kw):
        super().__init__(*a, **kw)
        self.out, self.started = out, 0.0

    def startTest(self, test):
        self.started = time.monotonic()
        super().startTest(test)

    def _emit(self, test, status, detail=""):
        rec = {"test": test.id().split(".")[-1], "status": status,
               "seconds": round(time.monotonic() - self.started, 1), "detail": detail[-3000:]}
        self.out.write(json.dumps(rec) + "\n")
        self.out.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._emit(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._emit(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._emit(test, "fail", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._emit(test, "skip", str(reason))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._emit(test, "xfail")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._emit(test, "fail", "unexpected success")


def _child(names, out_path):
    cls = TestDistBackendWithSpawn
    suite = unittest.TestSuite(cls(n) for n in names)
    with open(out_path, "a") as out:
        runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=0,
                                         resultclass=lambda *a, **kw: _Recorder(out, *a, **kw))
        runner.run(suite)


def _all_tests():
    os.environ[CHILD_ENV] = "gloo"
    cls = _suite_class("gloo", "spawn")
    return sorted(n for n in dir(cls) if n.startswith("test_"))


def run_backend(backend, names, args, out_path):
    """Runs `names` under `backend` in a fresh python; returns {test: record}."""
    env = dict(os.environ, **{CHILD_ENV: backend, "TERN_SUITE_START": args.start,
                              "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(args.timeout)})
    open(out_path, "w").close()
    done = {}
    todo = list(names)
    while todo:  # a child that dies mid-test is restarted after that test
        cmd = [sys.executable, os.path.abspath(__file__), "--child", out_path] + todo
        log = open(out_path + ".log", "a")
        subprocess.run(cmd, env=env, stdout=log, stderr=log, timeout=args.timeout * len(todo) + 60)
        with open(out_path) as f:
            for line in f:
                rec = json.loads(line)
                done[rec["test"]] = rec
        rest = [n for n in todo if n not in done]
        if rest and rest == todo:
            done[rest[0]] = {"test": rest[0], "status": "fail", "seconds": 0, "detail": "runner died"}
            rest = rest[1:]
        todo = rest
    return done


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return _child(sys.argv[3:], sys.argv[2])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-k", "--filter", default="", help="regex on test names")
    p.add_argument("--backends", default="gloo,tern")
    p.add_argument("--start", default="spawn", choices=["spawn", "fork"])
    p.add_argument("--timeout", type=int, default=120, help="seconds per test")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--workdir", default="/tmp/tern_torch_suite")
    args = p.parse_args()
    names = [n for n in _all_tests() if re.search(args.filter, n)]
    os.makedirs(args.workdir, exist_ok=True)
    backends = args.backends.split(",")
    results = {}
    for b in backends:
        t0 = time.monotonic()
        results[b] = run_backend(b, names, args, os.path.join(args.workdir, b + ".jsonl"))
        print("# %s: %d tests in %.0f s" % (b, len(names), time.monotonic() - t0), flush=True)
    for n in names:
        print("%-70s %s" % (n, "  ".join("%s=%s" % (b, results[b][n]["status"]) for b in backends)))
    summary = {b: {s: sorted(n for n in names if results[b][n]["status"] == s)
                   for s in ("pass", "fail", "skip", "xfail")} for b in backends}
    print()
    for b in backends:
        print("%s: %d passed, %d failed, %d skipped (of %d)" % (
            b, len(summary[b]["pass"]), len(summary[b]["fail"]), len(summary[b]["skip"]), len(names)))
    missing = []
    if "gloo" in backends and len(backends) > 1:
        other = [b for b in backends if b != "gloo"][0]
        ok = set(summary["gloo"]["pass"])
        missing = sorted(ok - set(summary[other]["pass"]))
        print("%s passes %d of the %d tests gloo passes" % (other, len(ok) - len(missing), len(ok)))
        for n in missing:
            print("  gloo passes, %s does not: %s (%s)" % (other, n, results[other][n]["status"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "summary": summary, "gloo_only": missing}, f, indent=1)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
