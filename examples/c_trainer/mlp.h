/* examples/c_trainer/mlp.h — a 784-128-10 multilayer perceptron (ReLU, softmax cross-entropy) in
 * plain C, deterministic: parameters and gradients are flat float arrays in one fixed layout so
 * the gradients can live in one shared arena, one tensor per parameter. */
#ifndef FGB_TRAINER_MLP_H
#define FGB_TRAINER_MLP_H

#include <stddef.h>
#include <stdint.h>

#define MLP_IN 784
#define MLP_HID 128
#define MLP_OUT 10

/* Parameters in layout order. W1 is stored input-major ([784][128]) and W2 hidden-major
 * ([128][10]) so both passes are contiguous axpy loops the compiler vectorises without
 * reassociating sums (which keeps results bitwise reproducible). */
enum { MLP_W1, MLP_B1, MLP_W2, MLP_B2, MLP_NPARAM };
typedef struct mlp_param {
  const char *name;
  size_t offset; /* floats from the start of the flat array */
  size_t count;
  uint32_t ndim;
  uint64_t shape[2];
} mlp_param;
extern const mlp_param mlp_params[MLP_NPARAM];
#define MLP_NFLOATS ((size_t)MLP_IN * MLP_HID + MLP_HID + (size_t)MLP_HID * MLP_OUT + MLP_OUT)

/* Deterministic He-uniform initialisation from `seed` (identical on every rank). */
void mlp_init(float *p, uint64_t seed);

/* Forward and backward over `n` samples (pixels 0..255, labels 0..9): adds the gradient of the mean
 * loss over the n samples into g (caller zeroes it) and returns the summed loss. */
double mlp_grad(const float *p, float *g, const uint8_t *const *x, const uint8_t *y, size_t n);

/* Number of the n samples classified correctly. */
size_t mlp_correct(const float *p, const uint8_t *x, const uint8_t *y, size_t n);

/* 64-bit FNV-1a of the parameters' bits: equal checksums mean bitwise-equal replicas. */
uint64_t mlp_checksum(const float *p);

#endif
