/* The planners' C ABI: what tools/tern-plan and the Python wrappers
 * (tern.planner, tern.priority, tern.gantt, tern.scheduler_plan and
 * tern.pipeline.schedule, through ctypes) call in libtern_planner.so: the
 * planners' logic lives only behind it.
 * JSON text in, JSON (or SVG) text out, so neither side shares a C++ type.
 *
 * Every function returns 0 on success and sets *out to the result; on failure
 * it returns 2 for an unusable input (malformed JSON, a missing or wrong field)
 * or 1 for anything else, and *out is one sentence saying why.  *out is freed
 * with ternPlanFree. */
#ifndef TERN_PLAN_H
#define TERN_PLAN_H

#ifdef __cplusplus
extern "C" {
#endif

/* docs/DESIGN.md's schedule output for model.json text.  bandwidth_gbps > 0 sets
 * every link's bandwidth (re-planning under measured contention); 0 keeps the
 * model's.  microbatches > 0 plans only that split. */
int ternPlanSchedule(const char* model_json, double bandwidth_gbps, long long microbatches, char** out);

/* The schedule of (microbatches, k); k = 0: the plan's best (for that split
 * when microbatches > 0).  format 0: the trace as JSON {"title", "microbatches",
 * "microbatch_size", "k", "iteration_ms", "stages", "events": [{"kind":
 * "forward"|"backward"|"activation"|"gradient", "stage", "micro", "start_ms",
 * "end_ms"}]} (a transfer's stage is its sender); 1: an SVG gantt chart. */
int ternPlanGantt(const char* model_json, double bandwidth_gbps, long long microbatches, long long k,
                  int format, char** out);

/* The SVG gantt chart of a trace in format 0's JSON, the planner's or one
 * measured (microbatches, microbatch_size and k may be left out). */
int ternPlanTraceSvg(const char* trace_json, char** out);

/* Stage `stage` of `stages`: its operations in the kFkB order for m
 * micro-batches in groups of k, as [["F"|"B", micro-batch], ...] (F forward,
 * B backward); what the pipeline runtime runs. */
int ternPlanKfkbOrder(long long m, long long k, long long stages, long long stage, char** out);

/* [level, ...] for a JSON list of whole numbers (lower: more urgent): the
 * distinct numbers spread evenly over TERN_PRIORITY_LEVELS levels, the
 * smallest at 0, as ternPlanPriorities maps TicTac's numbers. */
int ternPlanLevels(const char* numbers_json, char** out);

/* {"policy", "order", "priority"} for graph.json text; policy "tic" or "tac". */
int ternPlanPriorities(const char* graph_json, const char* policy, char** out);

/* {"policy", "efficiency", "makespan_ms", "lower_ms", "upper_ms", "random_efficiency"}:
 * TicTac's scheduling efficiency of the policy's order and the mean over
 * `samples` random orders drawn from `seed`. */
int ternPlanEfficiency(const char* graph_json, const char* policy, int samples, unsigned long long seed,
                       char** out);

/* The collectives' simulator (docs/PLANNERS.md): every allreduce algorithm's
 * predicted time at each size, and the model's choice, for a query
 * {"hosts", "ranks_per_host" (a number or one per host), "sizes": [bytes..],
 * optional "ternary", "link" (tcp|ucx), "gbps", "latency_us", "dtype_bytes",
 * "small_bytes", "ternary_min_bytes", "max_bits"}.  model_path: a model file
 * (NULL: the defaults).  format 0: JSON {"predictions": [{"algorithm",
 * "bytes", "ternary", "time_us", "bits", "runnable"}], "choice": {"<bytes>":
 * {"algorithm", "time_us", "bits"}}, ...}; 1: a table; 2: an SVG chart. */
int ternPlanCollectives(const char* query_json, const char* model_path, int format, char** out);

/* A model file's text fitted to {"measurements": [{"algorithm", "link",
 * "hosts", "ranks" or "ranks_per_host", "bytes", "dtype_bytes", "time_us"}]},
 * starting from the model file at model_path (NULL: the defaults), whose
 * figures the measurements do not touch stay. */
int ternPlanFitModel(const char* measurements_json, const char* model_path, char** out);

void ternPlanFree(char* text);

#ifdef __cplusplus
}
#endif
#endif
