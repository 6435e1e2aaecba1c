/* kernels_stub.c — keeps fgb_kernels non-empty until the first kernel lands. */
int fgb_kernels_present;
