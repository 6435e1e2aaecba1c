/* daemon/compress/registry.c — the table of compressors by name. Adding one is a new file with its
 * comp_ops table and one line in each list below (the two lists are checked to match in length). */
#include <string.h>

#include "compressor.h"

extern const comp_ops comp_none_ops, comp_fp16_ops, comp_topk_ops, comp_randomk_ops, comp_dgc_ops,
    comp_gaussiank_ops, comp_redsync_ops, comp_sidco_ops, comp_adtopk_ops, comp_powersgd_ops,
    comp_acpsgd_ops, comp_oktopk_ops;

/* clang-format off */
static const comp_ops *const all_ops[] = {
    &comp_none_ops,
    &comp_fp16_ops,
    &comp_topk_ops,
    &comp_randomk_ops,
    &comp_dgc_ops,
    &comp_gaussiank_ops,
    &comp_redsync_ops,
    &comp_sidco_ops,
    &comp_adtopk_ops,
    &comp_powersgd_ops,
    &comp_acpsgd_ops,
    &comp_oktopk_ops,
};

static const char *const all_names[] = {
    "none",
    "fp16",
    "topk",
    "randomk",
    "dgc",
    "gaussiank",
    "redsync",
    "sidco",
    "adtopk",
    "powersgd",
    "acpsgd",
    "oktopk",
    NULL,
};
/* clang-format on */

_Static_assert(sizeof all_ops / sizeof all_ops[0] + 1 == sizeof all_names / sizeof all_names[0],
               "registry lists differ in length");

const comp_ops *comp_find(const char *name) {
  if (name == NULL) return NULL;
  for (size_t i = 0; i < sizeof all_ops / sizeof all_ops[0]; i++)
    if (!strcmp(all_ops[i]->name, name)) return all_ops[i];
  return NULL;
}

const char *const *comp_names(void) {
  return all_names;
}

uint64_t comp_options_hash(const char *s) {
  if (!s || !*s) return 0;
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}
