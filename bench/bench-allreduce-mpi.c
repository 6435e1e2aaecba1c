/* bench-allreduce-mpi — the baseline for bench-allreduce: MPI_Allreduce (sum, then scale by 1/P:
 * the same average fgbuffd computes) of float32 buffers between the processes of one mpirun, same
 * sizes and iteration counts. Rank 0 prints "<bytes> <mean microseconds> <iterations>" per size.
 * Usage: mpirun -np P bench-allreduce-mpi [--min BYTES] [--max BYTES] [--iters-scale X] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_util.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t lo = 1024, hi = 64u << 20;
  double scale = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--min"))
      lo = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--max"))
      hi = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--iters-scale"))
      scale = atof(argv[i + 1]);
  }
  if (lo < 4 || hi < lo || hi / sizeof(float) > (size_t)1 << 30 || !(scale > 0)) {
    if (rank == 0) fprintf(stderr, "bench-allreduce-mpi: bad sizes\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  float *x = malloc(hi);
  if (x == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  const float inv = 1.0f / (float)size;
  for (size_t b = lo; b <= hi; b *= 4) {
    int n = (int)(b / sizeof(float)), it = bench_iters_for(b, scale);
    for (int i = 0; i < n; i++) x[i] = (float)(i % 97) * 0.01f;
    double t0 = 0;
    for (int i = 0; i < 3 + it; i++) {
      if (i == 3) t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (int k = 0; k < n; k++) x[k] *= inv;
    }
    double us = (MPI_Wtime() - t0) * 1e6 / it;
    if (rank == 0) printf("%zu %.2f %d\n", b, us, it);
    fflush(stdout);
  }
  free(x);
  MPI_Finalize();
  return 0;
}
