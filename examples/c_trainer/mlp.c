/* examples/c_trainer/mlp.c — forward, backward, evaluation and initialisation of the MLP. Sums run
 * in a fixed order (samples in order, then units), so a given input gives bitwise the same result
 * on every run and every rank. */
#include "mlp.h"

#include <math.h>
#include <string.h>

const mlp_param mlp_params[MLP_NPARAM] = {
    {"fc1.weight", 0, (size_t)MLP_IN *MLP_HID, 2, {MLP_IN, MLP_HID}},
    {"fc1.bias", (size_t)MLP_IN *MLP_HID, MLP_HID, 1, {MLP_HID, 0}},
    {"fc2.weight",
     (size_t)MLP_IN *MLP_HID + MLP_HID,
     (size_t)MLP_HID *MLP_OUT,
     2,
     {MLP_HID, MLP_OUT}},
    {"fc2.bias",
     (size_t)MLP_IN *MLP_HID + MLP_HID + (size_t)MLP_HID *MLP_OUT,
     MLP_OUT,
     1,
     {MLP_OUT, 0}},
};

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void mlp_init(float *p, uint64_t seed) {
  uint64_t s = seed;
  memset(p, 0, MLP_NFLOATS * sizeof(float));
  const int layers[2][2] = {{MLP_W1, MLP_IN}, {MLP_W2, MLP_HID}};
  for (int l = 0; l < 2; l++) {
    const mlp_param *w = &mlp_params[layers[l][0]];
    float a = sqrtf(6.0f / (float)layers[l][1]);
    for (size_t i = 0; i < w->count; i++) {
      float u = (float)(splitmix(&s) >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
      p[w->offset + i] = (2.0f * u - 1.0f) * a;
    }
  }
}

/* Hidden activations (after ReLU) and output logits of one sample. */
static void forward(const float *p, const uint8_t *x, float *h, float *o) {
  const float *w1 = p + mlp_params[MLP_W1].offset, *b1 = p + mlp_params[MLP_B1].offset;
  const float *w2 = p + mlp_params[MLP_W2].offset, *b2 = p + mlp_params[MLP_B2].offset;
  memcpy(h, b1, MLP_HID * sizeof(float));
  for (int k = 0; k < MLP_IN; k++) {
    if (x[k] == 0) continue; /* about half of Fashion-MNIST's pixels are background */
    float xv = (float)x[k] * (1.0f / 255.0f);
    const float *row = w1 + (size_t)k * MLP_HID;
    for (int j = 0; j < MLP_HID; j++) h[j] += xv * row[j];
  }
  for (int j = 0; j < MLP_HID; j++) h[j] = h[j] > 0.0f ? h[j] : 0.0f;
  memcpy(o, b2, MLP_OUT * sizeof(float));
  for (int j = 0; j < MLP_HID; j++) {
    if (h[j] == 0.0f) continue;
    const float *row = w2 + (size_t)j * MLP_OUT;
    for (int c = 0; c < MLP_OUT; c++) o[c] += h[j] * row[c];
  }
}

double mlp_grad(const float *p, float *g, const uint8_t *const *x, const uint8_t *y, size_t n) {
  const float *w2 = p + mlp_params[MLP_W2].offset;
  float *gw1 = g + mlp_params[MLP_W1].offset, *gb1 = g + mlp_params[MLP_B1].offset;
  float *gw2 = g + mlp_params[MLP_W2].offset, *gb2 = g + mlp_params[MLP_B2].offset;
  const float inv_n = 1.0f / (float)n;
  double loss = 0.0;
  for (size_t s = 0; s < n; s++) {
    float h[MLP_HID], o[MLP_OUT], d[MLP_OUT], dh[MLP_HID];
    forward(p, x[s], h, o);
    float mx = o[0];
    for (int c = 1; c < MLP_OUT; c++) mx = o[c] > mx ? o[c] : mx;
    float sum = 0.0f;
    for (int c = 0; c < MLP_OUT; c++) sum += (d[c] = expf(o[c] - mx));
    loss += (double)(logf(sum) - (o[y[s]] - mx));
    for (int c = 0; c < MLP_OUT; c++) d[c] = (d[c] / sum - (c == y[s] ? 1.0f : 0.0f)) * inv_n;
    for (int c = 0; c < MLP_OUT; c++) gb2[c] += d[c];
    for (int j = 0; j < MLP_HID; j++) {
      dh[j] = 0.0f;
      if (h[j] == 0.0f) continue; /* ReLU gate: no gradient through inactive units */
      const float *row = w2 + (size_t)j * MLP_OUT;
      float *grow = gw2 + (size_t)j * MLP_OUT;
      float acc = 0.0f;
      for (int c = 0; c < MLP_OUT; c++) {
        grow[c] += h[j] * d[c];
        acc += row[c] * d[c];
      }
      dh[j] = acc;
    }
    for (int j = 0; j < MLP_HID; j++) gb1[j] += dh[j];
    const uint8_t *xs = x[s];
    for (int k = 0; k < MLP_IN; k++) {
      if (xs[k] == 0) continue;
      float xv = (float)xs[k] * (1.0f / 255.0f);
      float *grow = gw1 + (size_t)k * MLP_HID;
      for (int j = 0; j < MLP_HID; j++) grow[j] += xv * dh[j];
    }
  }
  return loss;
}

size_t mlp_correct(const float *p, const uint8_t *x, const uint8_t *y, size_t n) {
  size_t ok = 0;
  for (size_t s = 0; s < n; s++) {
    float h[MLP_HID], o[MLP_OUT];
    forward(p, x + s * MLP_IN, h, o);
    int best = 0;
    for (int c = 1; c < MLP_OUT; c++)
      if (o[c] > o[best]) best = c;
    ok += best == y[s];
  }
  return ok;
}

uint64_t mlp_checksum(const float *p) {
  const uint8_t *b = (const uint8_t *)p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < MLP_NFLOATS * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
