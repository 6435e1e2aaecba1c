/* engine/eng_split.h — the engine's host data path of split all-reduces (policy dear; engine.h,
 * "Split all-reduce"): the zero-padded merge buffers a split owns between its reduce-scatter and
 * its all-gather. Engine thread only; eng_issue.c starts and polls the requests. */
#ifndef FGB_ENGINE_ENG_SPLIT_H
#define FGB_ENGINE_ENG_SPLIT_H

#include "engine.h"

#define ENG_SPLIT_GROUPS 6 /* one merge buffer per working type */

/* A working type's dense members of an item, in item order (the same on every rank): a group of
 * the engine's fused all-reduce (eng_issue.c) and a split's merge buffer (eng_split.c). */
typedef struct eng_wgroup {
  fgb_dtype wdt;     /* working type on the wire */
  uint32_t *members; /* indices into it->t */
  uint32_t n;
  uint64_t count; /* the members' elements */
} eng_wgroup;

/* Group the members of `it` without a compressor by working type into g[0..*ng); each group's
 * members array is calloc'ed (the caller frees it). FGB_ENOMEM, or FGB_EINVAL with more than
 * `max` working types; on failure nothing stays allocated and *ng is 0. */
fgb_status eng_wgroups(const eng_item *it, eng_wgroup *g, int max, int *ng);
/* The group's members converted to its working type, back to back into buf. */
void eng_wgroup_pack(const eng_wgroup *g, const eng_item *it, uint8_t *buf);

/* Start the reduce-scatter half of `it` on `s`: its dense members fused per working type into
 * merge buffers padded with zeros to a multiple of `size`, each reduce-scattered in place
 * (members with a compressor left in it->t[i].comp were synchronised per tensor before: they are
 * in no group). req[g] gets group g's request (NULL: nothing to send), *ng the groups. Returns the
 * requests started, or -1 (it->status set) when none was and the item fails; a failure after
 * some started sets it->status and returns their number (they must still complete). */
int eng_split_rs_start(eng_split *s, const comm_ops *ops, comm *c, int rank, int size, eng_item *it,
                       comm_req **req, int *ng);
/* The reduce-scatter requests completed: average this rank's block where members average. */
void eng_split_rs_finish(eng_split *s, eng_item *it);
/* The reduce-scatter item was delivered (any status): the all-gather may start. */
void eng_split_rs_done(eng_split *s, int status, const char *err);
int eng_split_rs_is_done(const eng_split *s);
/* Start the all-gather half in place (its reduce-scatter done and successful: the caller waits
 * and checks eng_split_status first); same conventions as eng_split_rs_start. */
int eng_split_ag_start(eng_split *s, const comm_ops *ops, comm *c, eng_item *it, comm_req **req,
                       int *ng);
/* The all-gather requests completed: results back into the members' memory in their types. */
void eng_split_ag_finish(eng_split *s, eng_item *it);

#endif
