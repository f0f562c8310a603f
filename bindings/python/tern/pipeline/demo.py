"""The pipeline-parallel demo: trains an MLP of equal layers, one process per stage.

  /usr/bin/python3 -m tern.pipeline.demo --stages 3
  /usr/bin/python3 -m tern.pipeline.demo --stages 3 --layers 6 --iterations 20 \\
      --schedule flush --microbatches 4 --k 2 --seed 1 --save out --report out/report.json
  /usr/bin/python3 -m tern.pipeline.demo --stages 4 --emulate-ms 20:40 --slow-stage 1:2.0 --rebalance

trains on sklearn's digits (or --data fashion), one process per stage on
this host, prints a summary, and with --save DIR writes DIR/final.pt (keys
layers.<global index>.<param>) and the stages' event logs, with --report
the JSON report.  --stages 1 is plain single-process training of the same
batches: the reference a flush run equals bitwise (same --microbatches).
--emulate-ms / --emulate-profile run each layer on an emulated accelerator
(tern.emulate: real math, then the device time asleep).  See docs/PIPELINE.md.
"""
import argparse
import json
import sys
import tempfile

from .. import emulate, emulate_models
from .config import Config
from .data import load
from .launch import run
from .migration import plan_partitions
from .migration_async import async_switch_batch, check_async
from .model import even_partition


def _pair(text, shape, kinds):
    """"A:B" as (kinds[0](A), kinds[1](B)); argparse prints the sentence on failure."""
    try:
        a, b = text.split(":")
        return kinds[0](a), kinds[1](b)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must look like {shape} ({kinds[0].__name__}:{kinds[1].__name__}), "
                                         f"not {text!r}.") from None


def _slow(text):
    """STAGE:FACTOR or STAGE:FACTOR@FROM-TO (slowed in batches FROM..TO-1 only) as
    (stage, factor, window or None); argparse prints the sentence on failure."""
    head, at, window = text.partition("@")
    stage, factor = _pair(head, "STAGE:FACTOR", (int, float))
    if not at:
        return stage, factor, None
    try:
        first, end = (int(v) for v in window.split("-"))
        if 0 <= first < end:
            return stage, factor, [first, end]
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"must look like STAGE:FACTOR@FROM-TO (batches FROM..TO-1, 0 <= FROM < TO), "
                                     f"not {text!r}.")


def _device_ms(text):
    """FWD:BWD[@SAMPLES] as [fwd, bwd(, samples)]; argparse prints the sentence on failure."""
    try:
        source = emulate.parse_ms(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return [source.fwd_ms, source.bwd_ms] + ([source.samples] if source.samples else [])


def _migration(text):
    """ITER:FROM:TO:NLAYERS as four ints; argparse prints the sentence on failure."""
    try:
        values = [int(v) for v in text.split(":")]
        if len(values) == 4:
            return values
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"must look like ITER:FROM:TO:NLAYERS (four integers), not {text!r}.")


def parser():
    p = argparse.ArgumentParser(prog="python3 -m tern.pipeline.demo", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stages", type=int, required=True, help="pipeline stages (processes); 1 = the reference")
    p.add_argument("--layers", type=int, help="equal layers of the MLP (default: 2 per stage)")
    p.add_argument("--iterations", type=int, default=20, help="batches to train (default 20)")
    p.add_argument("--schedule", choices=["async", "flush"], default="flush",
                   help="flush (default): synchronous kFkB, one step per batch; async: PipeDream 1F1B with weight "
                        "stashing")
    p.add_argument("--microbatches", type=int, help="micro-batches per batch (default: the smallest divisor >= stages)")
    p.add_argument("--k", type=int, help="kFkB group size K (1 = 1F1B, M = GPipe; flush only, default 1)")
    p.add_argument("--plan", action="store_true", help="(m, K) from the planner, re-planned when bandwidth changes")
    p.add_argument("--slow-stage", action="append", default=[], metavar="STAGE:FACTOR[@FROM-TO]", type=_slow,
                   help="stretch a stage's compute, for the whole run or in batches FROM..TO-1 only (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", metavar="DIR", help="write final.pt and the stages' event logs here")
    p.add_argument("--report", metavar="FILE.json", help="write the JSON report here")
    p.add_argument("--emulate-ms", metavar="FWD:BWD[@SAMPLES]", type=_device_ms,
                   help="run every layer on an emulated accelerator: FWD ms forward, BWD ms backward per "
                        "micro-batch (or per SAMPLES samples, scaled to each micro-batch's size)")
    p.add_argument("--emulate-profile", metavar="FILE|MODEL@DEVICE",
                   help="emulated device times from a profile JSON (a row per layer), or a named model's roofline "
                        "(resnet50@v100, vgg16@h100:fp16, ...) spread over the layers")
    p.add_argument("--emulate-batch", type=int, default=0,
                   help="the emulated batch (default --batch): a named profile's times, and the bytes on the wire "
                        "(the real math runs on --batch samples, messages are padded)")
    p.add_argument("--transport", choices=["auto", "shm", "tcp"], default="auto")
    p.add_argument("--data", choices=["digits", "fashion"], default="digits")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, help="layer width (default: the data's feature count)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--partition", help="layers per stage, e.g. 2,3,1 (default: even)")
    p.add_argument("--emulate-link", action="append", default=[], metavar="ITER:GBPS",
                   type=lambda t: _pair(t, "ITER:GBPS", (int, float)),
                   help="from batch ITER on, hold every message for its time at GBPS (0: off); repeatable")
    p.add_argument("--replan-threshold", type=float, default=0.3,
                   help="re-plan when a link's bandwidth moves by more than this fraction (default 0.3)")
    p.add_argument("--memory-mb", type=float, default=0, help="memory per stage for the planner's max_k (default: RAM)")
    p.add_argument("--no-stash", action="store_true", help="async without weight stashing (to see the check fail)")
    p.add_argument("--migrate", action="append", default=[], metavar="ITER:FROM:TO:NLAYERS", type=_migration,
                   help="live migration: at batch ITER, stage FROM starts moving NLAYERS layers to its neighbour "
                        "TO, training on (repeatable; pairs migrating at once must be disjoint)")
    p.add_argument("--rebalance", action="store_true",
                   help="move layers off a slowed stage to a neighbour, and back when it recovers, when the "
                        "planner's model predicts a gain (flush: at batch boundaries; async: at the mini-batch "
                        "boundaries of the 1F1B steady state)")
    p.add_argument("--rebalance-threshold", type=float, default=0.15,
                   help="the predicted gain a move needs (default 0.15: 15%%)")
    p.add_argument("--timeout", type=float, default=60.0, help="tern's timeout in seconds (a dead stage)")
    return p


def config_of(args, p):
    """The Config, or p.error(sentence) for flags that do not fit together."""
    if args.stages < 1:
        p.error(f"--stages must be at least 1, not {args.stages}.")
    if args.layers is None:
        args.layers = 2 * args.stages
    if args.layers < args.stages:
        p.error(f"--layers {args.layers} cannot fill {args.stages} stages (at least one layer each).")
    if args.iterations < 1:
        p.error(f"--iterations must be at least 1, not {args.iterations}.")
    if args.batch < 1:
        p.error(f"--batch must be at least 1, not {args.batch}.")
    if args.plan and (args.microbatches or args.k):
        p.error("--plan chooses the micro-batches and K itself: give either --plan or --microbatches/--k.")
    if args.plan and args.schedule == "async":
        p.error("--plan re-plans at batch boundaries, which only --schedule flush has; give --microbatches for async.")
    if args.k and args.schedule == "async":
        p.error("--k is the flush schedule's group size; async PipeDream runs 1F1B (K = 1).")
    m = args.microbatches or next(d for d in range(1, args.batch + 1) if args.batch % d == 0 and d >= min(args.stages, args.batch))
    if m < 1 or args.batch % m:
        p.error(f"--microbatches {m} must be a positive divisor of --batch {args.batch}.")
    k = args.k or 1
    if not 1 <= k <= m:
        p.error(f"--k {k} must be between 1 and --microbatches {m}.")
    slow = {}
    for stage, factor, window in args.slow_stage:
        if not 0 <= stage < args.stages:
            p.error(f"--slow-stage names stage {stage}, but the stages are 0..{args.stages - 1}.")
        if not factor >= 1:
            p.error(f"--slow-stage factor must be at least 1 (it slows a stage down), not {factor}.")
        slow[str(stage)] = [factor] + window if window else factor
    partition = None
    if args.partition:
        try:
            partition = [int(n) for n in args.partition.split(",")]
        except ValueError:
            p.error(f"--partition must be layer counts separated by commas, not {args.partition!r}.")
        if len(partition) != args.stages or min(partition) < 1 or sum(partition) != args.layers:
            p.error(f"--partition {args.partition} must give each of the {args.stages} stages at least one layer "
                    f"and add up to --layers {args.layers}.")
    for it, gbps in args.emulate_link:
        if it < 0 or gbps < 0:
            p.error(f"--emulate-link {it}:{gbps} needs an iteration >= 0 and a rate >= 0 Gbit/s.")
    if not args.replan_threshold > 0:
        p.error(f"--replan-threshold must be a positive fraction, not {args.replan_threshold}.")
    if args.emulate_ms and args.emulate_profile:
        p.error("give either --emulate-ms or --emulate-profile, not both.")
    if args.emulate_batch and (args.emulate_batch < args.batch or not (args.emulate_ms or args.emulate_profile)):
        p.error(f"--emulate-batch {args.emulate_batch} needs --emulate-ms or --emulate-profile and at least "
                f"--batch {args.batch} samples.")
    if args.emulate_profile:
        try:  # the sentence now, not in every stage process
            emulate_models.source(args.emulate_profile, args.emulate_batch or args.batch, groups=args.layers)
        except (ValueError, OSError) as e:
            p.error(f"--emulate-profile: {e}")
    try:
        if args.schedule == "async":
            check_async(args.migrate, m, args.stages, args.iterations)
        plan_partitions(partition or even_partition(args.layers, args.stages), args.migrate, args.iterations,
                        *([async_switch_batch(m)] if args.schedule == "async" else []))
    except ValueError as e:
        p.error(str(e))
    features = None
    try:
        features = load(args.data)[0].shape[1]
    except (RuntimeError, OSError, ValueError) as e:
        p.error(str(e))
    width = args.width or features
    if width < features:
        p.error(f"--width {width} is smaller than the {features} input features of --data {args.data}.")
    return Config(stages=args.stages, layers=args.layers, width=width, batch=args.batch, iterations=args.iterations,
                  schedule=args.schedule, microbatches=m, k=k, plan=args.plan, lr=args.lr, seed=args.seed,
                  data=args.data, partition=partition, slow=slow, stash=not args.no_stash,
                  emulate=[list(e) for e in args.emulate_link], replan_threshold=args.replan_threshold,
                  memory_bytes=args.memory_mb * 2**20, timeout=args.timeout, migrate=args.migrate,
                  rebalance=args.rebalance, rebalance_threshold=args.rebalance_threshold,
                  emulate_ms=list(args.emulate_ms) if args.emulate_ms else None,
                  emulate_profile=args.emulate_profile or "", emulate_batch=args.emulate_batch,
                  transport="" if args.transport == "auto" else args.transport)


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    cfg = config_of(args, p)
    try:
        with tempfile.TemporaryDirectory(prefix="tern-demo-") as scratch:
            report = run(cfg, args.save or scratch)
    except (RuntimeError, ValueError, OSError) as e:
        print(f"tern.pipeline.demo: {e}", file=sys.stderr)
        return 1
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    ms = sorted(report["iteration_ms"])
    emulated = f", emulated device: {sum(report['overruns'])} overruns" if cfg.emulate_ms or cfg.emulate_profile else ""
    print(f"{cfg.schedule} {cfg.stages} stages: {len(ms)} batches, median {ms[len(ms) // 2]:.1f} ms, "
          f"plan {report['plan_by_iter'][-1]}, weight_versions_ok {report['weight_versions_ok']}, "
          f"final loss {report['loss'][-1]}{emulated}")
    for e in report["rebalance"]:
        if e["action"] != "hold":
            print(f"rebalance after batch {e['iteration']}: {e['action']} a layer {e['best_move'][0]} -> "
                  f"{e['best_move'][1]}, partition {e['partition']} -> {e['new_partition']}, predicted "
                  f"{e['predicted_old_ms']:.1f} -> {e['predicted_new_ms']:.1f} ms (gain {e['predicted_gain']:.2f}x)")
    for m in report["migrations"]:
        print(f"migration: layers {m['layers']} stage {m['from']} -> {m['to']}, message at batch {m['message_iter']}, "
              f"completed at batch {m['done_iter']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
