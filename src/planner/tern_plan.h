/* The planners' C ABI: what tools/tern-plan and the Python wrapper
 * (tern.planner / tern.priority, through ctypes) call in libtern_planner.so.
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
 * when microbatches > 0).  format 0: the trace as JSON (for matplotlib),
 * 1: an SVG gantt chart. */
int ternPlanGantt(const char* model_json, double bandwidth_gbps, long long microbatches, long long k,
                  int format, char** out);

/* {"policy", "order", "priority"} for graph.json text; policy "tic" or "tac". */
int ternPlanPriorities(const char* graph_json, const char* policy, char** out);

/* {"policy", "efficiency", "makespan_ms", "lower_ms", "upper_ms", "random_efficiency"}:
 * TicTac's scheduling efficiency of the policy's order and the mean over
 * `samples` random orders drawn from `seed`. */
int ternPlanEfficiency(const char* graph_json, const char* policy, int samples, unsigned long long seed,
                       char** out);

void ternPlanFree(char* text);

#ifdef __cplusplus
}
#endif
#endif
