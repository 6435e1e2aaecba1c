/* examples/c_trainer/idx.h — reader of (gzip-compressed) IDX files, the format of MNIST and
 * Fashion-MNIST. The files are untrusted input: magic, dimensions and sizes are all checked. */
#ifndef FGB_TRAINER_IDX_H
#define FGB_TRAINER_IDX_H

#include <stddef.h>
#include <stdint.h>

typedef struct idx_set {
  uint8_t *images; /* n * rows * cols bytes, row-major */
  uint8_t *labels; /* n bytes, each < 10 */
  size_t n;
  uint32_t rows, cols;
} idx_set;

/* Load "<dir>/<prefix>-images-idx3-ubyte.gz" and "<dir>/<prefix>-labels-idx1-ubyte.gz"
 * (prefix "train" or "t10k"). Returns 0, or -1 with a message in err. */
int idx_load_set(const char *dir, const char *prefix, idx_set *out, char *err, size_t errlen);
void idx_free_set(idx_set *s);

#endif
