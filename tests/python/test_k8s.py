"""tools/tern-k8s: the rendered MPIJob against the operator's CRD schema and its
validation rules, RBAC consistency, refusals; `run` against the recorded-kubectl
stand-in (tests/k8s/kubectl); `local`: the launcher's exact mpirun across network
namespaces as worker pods, running tern ranks (root and iproute2 only)."""
import json
import os
import re
import shlex
import shutil
import subprocess

import jsonschema
import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(REPO, "tools", "tern-k8s")
STANDIN = os.path.join(REPO, "tests", "k8s")
BUILD = os.environ.get("TERN_BUILD_DIR", os.path.join(REPO, "build"))
# The Kubeflow MPI Operator's CRD (v0.8.2, Apache-2.0), kept in the repository: the offline checks always run.
CRD = os.environ.get("TERN_MPIJOB_CRD", os.path.join(STANDIN, "kubeflow.org_mpijobs.yaml"))
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def tern_k8s(*args, env=None, timeout=60):
    return subprocess.run([TOOL] + list(args), capture_output=True, text=True, env=env, timeout=timeout)


def render(*args):
    p = tern_k8s(*args)
    assert p.returncode == 0, p.stderr
    return list(yaml.safe_load_all(p.stdout))


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


# ---- render ---------------------------------------------------------------------------

RENDERS = {
    "gpu": ["--name", "llm", "--image", "r/tern:1", "--workers", "3", "--gpus-per-worker", "4",
            "--cpu", "16", "--memory", "64Gi", "--", "all_reduce_perf", "-b", "8", "-e", "1G"],
    "total-gpus": ["--name", "g", "--image", "r/tern:1", "--gpus", "24", "--gpus-per-worker", "8",
                   "--namespace", "ml", "--clean-pod-policy", "All", "--ttl", "60", "--backoff-limit", "0",
                   "--active-deadline", "3600", "--service-account", "tern-jobs", "--", "train", "--steps", "10"],
    "cpu-only": ["--name", "c", "--image", "r/tern:1", "--workers", "2", "--gpus-per-worker", "0",
                 "--slots", "5", "--clean-pod-policy", "None", "--", "prog", "it's quoted"],
}


@pytest.fixture(scope="module")
def crd_schema():
    with open(CRD) as f:  # in the repository: a missing CRD is a failure, not a skip
        crd = yaml.safe_load(f)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v2beta1"]
    return version["schema"]["openAPIV3Schema"]


def operator_errors(job):
    """The operator's ValidateMPIJob (pkg/apis/kubeflow/validation, v0.8.2), after its
    defaulting: the checks an API server with the operator's webhook-less CRD cannot do."""
    errs, spec = [], job["spec"]
    replicas = spec["mpiReplicaSpecs"].get("Worker", {}).get("replicas") or 1
    host = "%s-worker-%d" % (job["metadata"]["name"], replicas - 1)
    if not DNS1035.match(host) or len(host) > 63:
        errs.append("invalid pod hostname " + host)
    if spec.get("slotsPerWorker", 1) < 0:
        errs.append("slotsPerWorker negative")
    rp = spec.get("runPolicy", {})
    if rp.get("cleanPodPolicy") not in ("None", "Running", "All"):
        errs.append("cleanPodPolicy %r" % rp.get("cleanPodPolicy"))
    for k in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        if rp.get(k, 0) < 0:
            errs.append(k + " negative")
    if spec.get("mpiImplementation", "OpenMPI") not in ("OpenMPI", "Intel", "MPICH"):
        errs.append("mpiImplementation")
    for role, rs in spec["mpiReplicaSpecs"].items():
        if rs.get("replicas") is None:
            errs.append(role + " replicas missing")
        if rs.get("restartPolicy") not in ("Never", "OnFailure"):
            errs.append(role + " restartPolicy %r" % rs.get("restartPolicy"))
        if not rs["template"]["spec"].get("containers"):
            errs.append(role + " has no container")
    if spec["mpiReplicaSpecs"]["Launcher"].get("replicas") != 1:
        errs.append("launcher replicas must be 1")
    if spec["mpiReplicaSpecs"]["Worker"].get("replicas", 0) <= 0:
        errs.append("worker replicas must be >= 1")
    return errs


@pytest.mark.parametrize("case", sorted(RENDERS))
def test_render_is_valid_for_the_crd_and_the_operator(case, crd_schema):
    (job,) = by_kind(render(*RENDERS[case]), "MPIJob")
    assert job["apiVersion"] == "kubeflow.org/v2beta1"
    jsonschema.Draft4Validator(crd_schema).validate(job)
    assert operator_errors(job) == []
    rp = job["spec"]["runPolicy"]
    # seed 003: deletion policy and retries set explicitly, never left to defaults
    assert {"cleanPodPolicy", "ttlSecondsAfterFinished", "backoffLimit"} <= set(rp)
    assert job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert "readinessProbe" in worker


def test_the_schema_check_can_fail(crd_schema):
    """The validator is not vacuous: a wrong type and a wrong field are caught."""
    (job,) = by_kind(render(*RENDERS["gpu"]), "MPIJob")
    job["spec"]["slotsPerWorker"] = "four"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(crd_schema).validate(job)
    (job,) = by_kind(render(*RENDERS["gpu"]), "MPIJob")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {"limits": []}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(crd_schema).validate(job)


def test_operator_rules_catch_what_they_should():
    (job,) = by_kind(render(*RENDERS["gpu"]), "MPIJob")
    job["metadata"]["name"] = "x" * 60
    job["spec"]["runPolicy"]["cleanPodPolicy"] = "Sometimes"
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    assert len(operator_errors(job)) == 3


@pytest.mark.parametrize("case", sorted(RENDERS))
def test_shape_follows_the_command_line(case):
    args = RENDERS[case]
    (job,) = by_kind(render(*args), "MPIJob")
    opt = lambda flag, default=None: args[args.index(flag) + 1] if flag in args else default
    g = int(opt("--gpus-per-worker"))
    workers = int(opt("--gpus")) // g if opt("--gpus") else int(opt("--workers"))
    slots = g or int(opt("--slots"))
    spec = job["spec"]
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == workers
    assert spec["slotsPerWorker"] == slots
    assert spec["runPolicy"]["cleanPodPolicy"] == opt("--clean-pod-policy", "Running")
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert worker["resources"].get("limits", {}).get("nvidia.com/gpu") == (g or None)
    assert "nvidia.com/gpu" not in launcher["resources"].get("limits", {})
    line = launcher["command"][-1]
    program = args[args.index("--") + 1:]
    # after the secret is drawn the shell execs mpirun; shlex splits words as sh does
    words = shlex.split(line.split("&& exec ", 1)[1])
    assert words[:3] == ["mpirun", "-np", str(workers * slots)]
    assert words[-len(program):] == program
    env = {e["name"]: e["value"] for e in launcher["env"]}
    name, ns = opt("--name"), opt("--namespace", "default")
    assert env["TERN_ROOT"].startswith("%s-worker-0.%s.%s.svc:" % (name, name, ns))


def test_rbac_is_consistent_and_least_privilege():
    for args in RENDERS.values():
        docs = render(*args)
        ns = docs[-1]["metadata"]["namespace"]
        accounts = {d["metadata"]["name"] for d in by_kind(docs, "ServiceAccount")}
        roles = {d["metadata"]["name"]: d for d in by_kind(docs, "Role")}
        (job,) = by_kind(docs, "MPIJob")
        for rs in job["spec"]["mpiReplicaSpecs"].values():
            assert rs["template"]["spec"]["serviceAccountName"] in accounts
        for b in by_kind(docs, "RoleBinding"):
            assert b["roleRef"]["kind"] == "Role" and b["roleRef"]["name"] in roles
            for s in b["subjects"]:
                assert s["kind"] == "ServiceAccount" and s["name"] in accounts and s["namespace"] == ns
        for role in roles.values():
            assert role["metadata"]["namespace"] == ns
            for rule in role["rules"]:
                for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in rule.get(key, []), rule
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
        # only the launcher holds a token; workers need no API access
        assert job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["automountServiceAccountToken"] is False
        assert "--service-account" not in args or accounts == {args[args.index("--service-account") + 1]}


BASE = ["--image", "r/t", "--gpus-per-worker", "4"]


@pytest.mark.parametrize("args,says", [
    (["--name", "Bad", "--workers", "1"] + BASE + ["--", "p"], "not a DNS-1035 label"),
    (["--name", "9lives", "--workers", "1"] + BASE + ["--", "p"], "not a DNS-1035 label"),
    (["--name", "a_b", "--workers", "1"] + BASE + ["--", "p"], "not a DNS-1035 label"),
    (["--name", "ends-", "--workers", "1"] + BASE + ["--", "p"], "not a DNS-1035 label"),
    # 54 characters: NAME-worker-9 is 63 (fine), NAME-worker-10 is 64
    (["--name", "a" * 54, "--workers", "11"] + BASE + ["--", "p"], "worker-10 would have 64 characters"),
    (["--name", "a" * 55, "--workers", "1"] + BASE + ["--", "p"], "worker-0 would have 64 characters"),
    (["--name", "j", "--workers", "2", "--image", "r/t", "--gpus-per-worker", "2", "--", "p"], "too few"),
    (["--name", "j", "--workers", "2", "--image", "r/t", "--gpus-per-worker", "1", "--", "p"], "too few"),
    (["--name", "j", "--gpus", "10"] + BASE + ["--", "p"], "not a positive multiple"),
    (["--name", "j", "--gpus", "8", "--workers", "2"] + BASE + ["--", "p"], "exactly one of"),
    (["--name", "j", "--workers", "2"] + BASE, "no program given"),
    (["--name", "j", "--workers", "2"] + BASE + ["--"], "no program given"),
    (["--name", "j", "--workers", "2", "--image", "r/t", "--gpus-per-worker", "0", "--", "p"], "needs --slots"),
    (["--name", "j", "--workers", "2", "--slots", "2"] + BASE + ["--", "p"], "differs from --gpus-per-worker"),
    (["--name", "j", "--workers", "0"] + BASE + ["--", "p"], "at least 1"),
    (["--name", "j", "--workers", "1", "--ttl", "-1"] + BASE + ["--", "p"], "--ttl must not be negative"),
    (["--name", "j", "--workers", "1", "--gpus-per-worker", "4", "--", "p"], "--image is required"),
])
def test_render_refuses(args, says):
    p = tern_k8s(*args)
    assert p.returncode != 0 and p.stdout == ""
    assert says in p.stderr, p.stderr
    assert p.stderr.startswith("tern-k8s: ") and p.stderr.count("\n") == 1


def test_longest_name_that_fits_is_accepted():
    (job,) = by_kind(render("--name", "a" * 54, "--workers", "10", *BASE, "--", "p"), "MPIJob")
    assert operator_errors(job) == []


# ---- run, against the kubectl stand-in ---------------------------------------------------

class Cluster:
    """A directory the stand-in keeps its scenario, state and call record in."""

    def __init__(self, path, **scenario):
        self.path = str(path)
        with open(os.path.join(self.path, "scenario.json"), "w") as f:
            json.dump(scenario, f)

    def run(self, *args, timeout=60):
        env = dict(os.environ, KUBECTL_STANDIN=self.path, PATH=STANDIN + os.pathsep + os.environ["PATH"])
        return tern_k8s(*args, env=env, timeout=timeout)

    def calls(self):
        try:
            with open(os.path.join(self.path, "calls.jsonl")) as f:
                return [json.loads(line) for line in f]
        except FileNotFoundError:
            return []

    def applied_kinds(self):
        return [d["kind"] for c in self.calls() if c["argv"][0] == "apply" for d in yaml.safe_load_all(c["stdin"])]

    def deleted(self):
        """What the delete calls name, without their flags and -n's value."""
        out = []
        for c in self.calls():
            argv = c["argv"]
            if argv[0] == "delete":
                out += [w for i, w in enumerate(argv[1:], 1) if not w.startswith("-") and argv[i - 1] != "-n"]
        return out


SHAPE = ["--name", "demo", "--image", "r/t", "--workers", "2", "--gpus-per-worker", "3"]
JOB = ["run"] + SHAPE + ["--poll", "0.01", "--ready-timeout", "10"]


def test_run_succeeds_creates_rbac_follows_the_log_and_cleans_up(tmp_path):
    c = Cluster(tmp_path, ready_after=2, log="rank 0: all good\n", exit=0)
    p = c.run(*JOB, "--", "prog")
    assert p.returncode == 0, p.stderr
    assert "rank 0: all good" in p.stdout
    for w in ("demo-worker-0", "demo-worker-1"):   # one progress line per worker and state
        assert "worker %s: Pending (ContainerCreating)" % w in p.stderr
        assert "worker %s: Ready" % w in p.stderr
    assert c.applied_kinds() == ["ServiceAccount", "Role", "RoleBinding", "MPIJob"]
    order = [" ".join(x["argv"][:2]) for x in c.calls()]
    assert order.index("auth can-i") < order.index("apply -n")   # permission before anything is made
    # the launcher's log is read only after every worker was seen Ready
    assert [x["argv"][0] for x in c.calls()].index("logs") > max(
        i for i, x in enumerate(c.calls()) if "training.kubeflow.org/job-role=worker" in " ".join(x["argv"]))
    assert c.deleted() == ["mpijob", "demo", "rolebinding/demo", "role/demo", "serviceaccount/demo"]
    assert "job demo succeeded" in p.stderr


def test_run_reuses_rbac_that_is_present_and_leaves_it(tmp_path):
    c = Cluster(tmp_path, rbac=["demo"])
    p = c.run(*JOB, "--", "prog")
    assert p.returncode == 0, p.stderr
    assert c.applied_kinds() == ["MPIJob"]
    assert "reusing service account demo" in p.stderr
    assert c.deleted() == ["mpijob", "demo"]


def test_run_keep_keeps_the_job(tmp_path):
    c = Cluster(tmp_path)
    p = c.run(*JOB, "--keep", "job", "--keep", "rbac", "--", "prog")
    assert p.returncode == 0, p.stderr
    assert c.deleted() == []


def test_run_refuses_a_name_that_exists(tmp_path):
    c = Cluster(tmp_path, jobs=["demo"])
    p = c.run(*JOB, "--", "prog")
    assert p.returncode == 1
    assert p.stderr.strip() == "tern-k8s: job demo already exists in default"
    assert c.applied_kinds() == [] and c.deleted() == []


def test_render_check_asks_the_cluster(tmp_path):
    args = ["render", "--check"] + SHAPE + ["--namespace", "ml", "--", "prog"]
    p = Cluster(tmp_path, jobs=["demo"]).run(*args)
    assert p.returncode == 1 and p.stdout == ""
    assert "job demo already exists in ml" in p.stderr
    free = tmp_path / "free"
    free.mkdir()
    p = Cluster(free).run(*args)
    assert p.returncode == 0 and "kind: MPIJob" in p.stdout


def test_run_stops_when_not_permitted(tmp_path):
    c = Cluster(tmp_path, can_i="no")
    p = c.run(*JOB, "--", "prog")
    assert p.returncode == 1
    assert "not permitted to create MPIJobs in namespace default" in p.stderr
    assert c.applied_kinds() == []


def test_run_times_out_on_a_worker_that_never_gets_ready(tmp_path):
    c = Cluster(tmp_path, ready_after=None, waiting="ImagePullBackOff")
    p = c.run(*JOB, "--ready-timeout", "0.3", "--", "prog")
    assert p.returncode == 1
    assert re.search(r"worker demo-worker-0 was not ready after 0.3 s \(last state: Pending "
                     r"\(ImagePullBackOff\)\); job demo deleted", p.stderr), p.stderr
    assert "mpijob" in c.deleted() and not any(x["argv"][0] == "logs" for x in c.calls())


def test_run_gives_up_on_a_launcher_that_never_starts(tmp_path):
    # workers Ready at the first poll: on a loaded host one poll of the stand-in
    # took longer than the 0.3 s meant for the launcher, and the workers' wait failed first
    c = Cluster(tmp_path, stuck="ErrImagePull", ready_after=0)
    p = c.run(*JOB[:-1], "0.3", "--", "prog")
    assert p.returncode == 1
    assert ("the launcher demo-launcher-x7k2p did not start within 0.3 s (Pending (ErrImagePull)); "
            "job demo deleted") in p.stderr, p.stderr
    assert "mpijob" in c.deleted()


def test_run_passes_on_the_launchers_exit_code_and_deletes_the_job(tmp_path):
    c = Cluster(tmp_path, exit=7, log="rank 1: wrong result\n")
    p = c.run(*JOB, "--", "prog")
    assert p.returncode == 7
    assert "rank 1: wrong result" in p.stdout
    assert "job demo failed: the launcher exited with code 7; job demo deleted" in p.stderr
    assert c.deleted()[:2] == ["mpijob", "demo"]


def test_run_without_the_operator_is_a_sentence(tmp_path):
    c = Cluster(tmp_path, crd=False)
    p = c.run(*JOB, "--", "prog")
    assert p.returncode == 1
    assert 'doesn\'t have a resource type "mpijob"' in p.stderr and p.stderr.count("\n") == 1


# ---- local: the launcher's mpirun across network namespaces ------------------------------

def netns_state():
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    etc = sorted(os.listdir("/etc/netns")) if os.path.isdir("/etc/netns") else None
    return sorted(line.split()[0] for line in ns.splitlines() if line.startswith("ternk8s")), etc


def local(*args, timeout=200):
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("mpirun"):
        pytest.skip("tern-k8s local needs root, iproute2 and OpenMPI's mpirun")
    before = netns_state()
    # No OMPI_* from outside (scripts/test.sh exports OMPI_ALLOW_RUN_AS_ROOT): the job's own
    # env must be enough for mpirun.  TERN_K8S_TEST_LEAK must not reach the ranks.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_")}
    p = tern_k8s("local", "--name", "lt", "--workers", "2", "--gpus-per-worker", "0", "--slots", "2",
                 "--timeout", "150", *args, env=dict(env, TERN_K8S_TEST_LEAK="1"), timeout=timeout)
    assert netns_state() == before, "namespaces or /etc/netns entries left behind"
    return p


def test_local_perf_binary_across_pods():
    perf = os.path.join(BUILD, "perf", "all_reduce_perf")
    if not os.path.exists(perf):
        pytest.skip("%s not built" % perf)
    p = local("--", perf, "-b", "8", "-e", "256K", "-f", "8", "-w", "1", "-n", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "# Out of bounds values : 0 OK" in p.stdout, p.stdout
    for rank, pod in ((0, "lt-worker-0"), (1, "lt-worker-0"), (2, "lt-worker-1"), (3, "lt-worker-1")):
        assert re.search(r"Rank +%d .* on %s " % (rank, pod), p.stdout), p.stdout


def test_local_allreduce_check_across_pods():
    if not os.path.exists(os.path.join(BUILD, "python", "tern")):
        pytest.skip("the Python module is not built in %s" % BUILD)
    p = local("--", "/usr/bin/python3", os.path.join(STANDIN, "allreduce_check.py"),
              os.path.join(BUILD, "python"), "2")
    assert p.returncode == 0, p.stdout + p.stderr
    oks = sorted(re.findall(r"rank (\d) of 4 on (lt-worker-\d): allreduce ok", p.stdout))
    assert oks == [("0", "lt-worker-0"), ("1", "lt-worker-0"), ("2", "lt-worker-1"), ("3", "lt-worker-1")], p.stdout


def test_local_failure_passes_the_code_on_and_cleans_up():
    p = local("--", "/bin/sh", "-c", 'if [ "$OMPI_COMM_WORLD_RANK" = 3 ]; then exit 5; fi')
    assert p.returncode == 5, p.stdout + p.stderr
    assert "job lt failed: the launcher exited with code 5" in p.stderr


def test_local_timeout_kills_the_ranks_and_cleans_up():
    p = local("--timeout", "3", "--", "/bin/sleep", "60", timeout=60)
    assert p.returncode == 1
    assert "the launcher did not finish within 3 s" in p.stderr, p.stderr
    left = subprocess.run(["pgrep", "-f", "^/bin/sleep 60$"], capture_output=True, text=True).stdout
    assert left == "", "ranks outlived their pods: " + left
