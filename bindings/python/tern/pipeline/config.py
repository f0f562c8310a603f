"""What one pipeline run is: model, data, schedule, knobs.  The demo CLI
builds it from flags; the stage processes receive it as JSON."""
import dataclasses
import json


@dataclasses.dataclass
class Config:
    stages: int = 3
    layers: int = 6
    width: int = 64
    classes: int = 10
    batch: int = 64
    iterations: int = 10
    schedule: str = "flush"          # "flush" (kFkB, one step per batch) | "async" (PipeDream 1F1B)
    microbatches: int = 4
    k: int = 1
    plan: bool = False               # ask the planner for (m, K) at batch boundaries (flush)
    lr: float = 0.05
    seed: int = 0
    data: str = "digits"             # "digits" (sklearn) | "fashion" (Debian's Fashion-MNIST)
    partition: list = None           # layers per stage; default as even as possible
    slow: dict = dataclasses.field(default_factory=dict)   # {stage: factor | [factor, from, to]}: compute-time factor (in batches from..to-1)
    stash: bool = True               # async weight stashing (False only to show the check fails)
    emulate: list = dataclasses.field(default_factory=list)  # [[iteration, gbps]]: emulated link rate from then on
    replan_threshold: float = 0.3    # re-plan when a link's measured bandwidth moves by more than this fraction
    memory_bytes: float = 0          # per stage, for the planner's max_k; 0: this machine's RAM
    timeout: float = 60.0            # tern's timeout (a dead stage is an error within it)
    transport: str = ""              # TERN_TRANSPORT for the stage processes ("" = auto)
    sweep: list = None               # [[m, K], ...]: run these in turn, one batch each (perf: every candidate measured)
    netns: list = None               # a network namespace per stage (perf: emulated hosts); stages meet at root
    root: str = ""                   # TERN_ROOT (host:port) when netns is given
    rebalance: bool = False          # move layers off slowed stages (flush), decided with the planner's model
    rebalance_threshold: float = 0.15  # the predicted gain a move needs
    migrate: list = dataclasses.field(default_factory=list)  # [[iteration, from, to, nlayers]]: live migrations (flush)
    flow_classes: int = 0            # tern's network flow classes (0: its default, 3); 8 gives every level its own
    emulate_ms: list = None          # [fwd, bwd(, samples)]: every layer's emulated device time in ms per
                                     # micro-batch (or per `samples` samples) (tern.emulate)
    emulate_profile: str = ""        # or device times from a profile: a JSON file, MODEL@DEVICE[:DTYPE] or DEVICE
    emulate_batch: int = 0           # the emulated batch (0: --batch): roofline times and the bytes on the wire
    progress: str = ""               # a file stage 0 rewrites with each finished batch's number (perf scripts)

    def slow_factor(self, stage, iteration=0):
        """Stage `stage`'s compute-time factor in batch `iteration`: a factor
        holds for the whole run, [factor, from, to] only in batches
        from..to-1 (a slowdown that ends: the stage recovers)."""
        spec = self.slow.get(str(stage), self.slow.get(stage, 1.0))
        if isinstance(spec, (list, tuple)):
            factor, first, end = spec
            return float(factor) if first <= iteration < end else 1.0
        return float(spec)

    def to_json(self):
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text):
        return cls(**json.loads(text))
