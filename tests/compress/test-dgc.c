/* tests/compress/test-dgc.c — DGC's memory and schedule: momentum correction (u = m u + g,
 * v += u; Nesterov u = m (u + g), v += u + g) checked against a host model with everything sent
 * (density 1) and with momentum-factor masking (u and v zero exactly where sent, kept elsewhere);
 * local clipping scales g to the clip norm / sqrt(P); the warm-up schedule lays out
 * max(coeff^(e+1), density) per epoch, every step within [0.8 k_e, k_e]. */
#include "comp_test.h"

enum { N = 5000 };

static void state_uv(ct_job *j, float *u, float *v) {
  void *blob = NULL;
  size_t bytes = 0, len = 0;
  REQUIRE(j->ops->state_export(j->st[0], &j->ex, &blob, &bytes) == FGB_OK);
  const void *pv = ct_region(blob, bytes, 0, &len);
  REQUIRE(len == N * 4);
  memcpy(v, pv, len);
  const void *pu = ct_region(blob, bytes, 2, &len);
  REQUIRE(len == N * 4);
  memcpy(u, pu, len);
  free(blob);
}

int main(int argc, char **argv) {
  comp_exec ex = ct_exec(argc, argv);
  static float g[N], u[N], v[N], mu[N], mv[N], o[N], u1[N], v1[N];
  float *dg = ct_dev(&ex, NULL, N * 4), *dout = ct_dev(&ex, NULL, N * 4);
  /* Density 1: everything is sent each step, so out = v (after accumulation), then u = v = 0. */
  for (int nesterov = 0; nesterov < 2; nesterov++) {
    comp_params p = {.density = 1.0,
                     .options = nesterov ? "nesterov=1,momentum=0.5" : "momentum=0.5,masking=0"};
    ct_job j;
    REQUIRE(ct_job_create(&j, "dgc", &ex, 1, N, &p) == FGB_OK);
    memset(mu, 0, sizeof mu);
    memset(mv, 0, sizeof mv);
    for (uint64_t step = 0; step < 3; step++) {
      ct_fill(g, N, CT_GAUSS, 1.0, 60 + step);
      REQUIRE(kern_from_host(&ex, dg, g, sizeof g) == FGB_OK);
      REQUIRE(ct_job_step(&j, &dg, step, &dout, 1.0f) == FGB_OK);
      ct_get(&ex, o, dout, sizeof o);
      state_uv(&j, u, v);
      uint64_t bad = 0;
      for (int i = 0; i < N; i++) {
        if (nesterov) {
          mu[i] = 0.5f * (mu[i] + g[i]);
          mv[i] += mu[i] + g[i];
        } else {
          mu[i] = 0.5f * mu[i] + g[i];
          mv[i] += mu[i];
        }
        bad += o[i] != mv[i] || v[i] != 0 || u[i] != (nesterov ? 0.0f : mu[i]);
        mv[i] = 0;
        if (nesterov) mu[i] = 0; /* masking on */
      }
      CHECK_MSG(bad == 0, "nesterov=%d step %llu: %llu entries off the model", nesterov,
                (unsigned long long)step, (unsigned long long)bad);
    }
    ct_job_destroy(&j);
  }
  /* Masking at density 0.01: u and v zero exactly at the sent indices, unchanged elsewhere. */
  {
    comp_params p = {.density = 0.01};
    ct_job j;
    REQUIRE(ct_job_create(&j, "dgc", &ex, 1, N, &p) == FGB_OK);
    for (uint64_t step = 0; step < 2; step++) {
      state_uv(&j, u, v);
      ct_fill(g, N, CT_STUDENT3, 1.0, 70 + step);
      REQUIRE(kern_from_host(&ex, dg, g, sizeof g) == FGB_OK);
      REQUIRE(ct_job_step(&j, &dg, step, &dout, 1.0f) == FGB_OK);
      ct_get(&ex, o, dout, sizeof o);
      state_uv(&j, u1, v1);
      uint64_t bad = 0, sent = 0;
      for (int i = 0; i < N; i++) {
        float un = 0.9f * u[i] + g[i], vn = v[i] + un;
        if (o[i] != 0) {
          sent++;
          bad += o[i] != vn || u1[i] != 0 || v1[i] != 0;
        } else {
          bad += u1[i] != un || v1[i] != vn;
        }
      }
      CHECK(bad == 0);
      CHECK(sent >= 40 && sent <= 50); /* k = ceil(5000 * 0.01) = 50, at least 0.8k */
    }
    ct_job_destroy(&j);
  }
  /* Clipping: with P = 4 ranks the local clip is clip / 2; everything sent, momentum 0. */
  {
    comp_params p = {.density = 1.0, .options = "clip=2,momentum=0"};
    ct_job j;
    REQUIRE(ct_job_create(&j, "dgc", &ex, 4, N, &p) == FGB_OK);
    ct_fill(g, N, CT_GAUSS, 1.0, 80); /* norm ~ 70, far above 1 */
    float *grads[4] = {dg, dg, dg, dg}, *outs[4] = {dout, dout, dout, dout};
    REQUIRE(kern_from_host(&ex, dg, g, sizeof g) == FGB_OK);
    REQUIRE(ct_job_step(&j, grads, 0, outs, 0.25f) == FGB_OK);
    ct_get(&ex, o, dout, sizeof o);
    double nrm = 0;
    for (int i = 0; i < N; i++) nrm += (double)o[i] * o[i];
    CHECK_MSG(fabs(sqrt(nrm) - 1.0) < 1e-4, "clipped norm %g, want 1", sqrt(nrm));
    ct_job_destroy(&j);
  }
  /* Warm-up: 3 epochs of 2 steps, coeff = 0.01^(1/4): densities 0.316, 0.1, 0.0316, then 0.01. */
  {
    comp_params p = {.density = 0.01, .options = "warmup_epochs=3,steps_per_epoch=2"};
    ct_job j;
    REQUIRE(ct_job_create(&j, "dgc", &ex, 1, N, &p) == FGB_OK);
    double coeff = pow(0.01, 0.25);
    for (uint64_t step = 0; step < 8; step++) {
      uint64_t e = step / 2;
      double d = e < 3 ? fmax(pow(coeff, (double)(e + 1)), 0.01) : 0.01;
      uint32_t ke = (uint32_t)ceil(N * d);
      ct_fill(g, N, CT_LAPLACE, 1.0, 90 + step);
      REQUIRE(kern_from_host(&ex, dg, g, sizeof g) == FGB_OK);
      REQUIRE(ct_job_step(&j, &dg, step, NULL, 1.0f) == FGB_OK);
      comp_coo_header h = ct_header(&j, 0);
      CHECK_MSG(h.capacity == ke && j.ph[0].bytes == comp_coo_bytes(ke, 4),
                "step %llu: capacity %u, want %u", (unsigned long long)step, h.capacity, ke);
      CHECK_MSG(h.count <= ke && h.count >= 0.8 * ke, "step %llu: %u of %u",
                (unsigned long long)step, h.count, ke);
    }
    ct_job_destroy(&j);
  }
  /* More than 1.3k candidates pass the sampled threshold (every |v| equal: the sample's kth lets
   * all N pass): the reference resamples, i.e. sends the exact top k (here the k lowest indices).
   * resample=0 keeps raising the threshold above the common magnitude and sends nothing. Both
   * search modes. Then a heavy mass of equal entries under a few large ones, where the sample
   * sees only the mass. */
  for (int search = 0; search < 2; search++)
    for (int resample = 0; resample < 2; resample++) {
      char opts[96];
      snprintf(opts, sizeof opts, "momentum=0,resample=%d,search=%s", resample,
               search ? "count" : "hist");
      comp_params p = {.density = 0.01, .options = opts};
      ct_job j;
      REQUIRE(ct_job_create(&j, "dgc", &ex, 1, N, &p) == FGB_OK);
      for (int i = 0; i < N; i++) g[i] = i & 1 ? -0.5f : 0.5f;
      REQUIRE(kern_from_host(&ex, dg, g, sizeof g) == FGB_OK);
      REQUIRE(ct_job_step(&j, &dg, 0, NULL, 1.0f) == FGB_OK);
      comp_coo_header h = ct_header(&j, 0);
      if (resample) {
        CHECK_MSG(h.count == 50, "%s: %u sent, want exactly k = 50", opts, h.count);
        int32_t idx[50];
        size_t off = sizeof h + (size_t)h.capacity * 4;
        REQUIRE(kern_to_host(&ex, idx, (char *)j.ph[0].send + off, sizeof idx) == FGB_OK);
        for (int q = 0; q < 50; q++) CHECK(idx[q] == q);
      } else {
        CHECK_MSG(h.count < 40, "%s: %u sent (the search overshoots)", opts, h.count);
      }
      ct_job_destroy(&j);
    }
  kern_free(&ex, dg);
  kern_free(&ex, dout);
  TEST_DONE();
}
