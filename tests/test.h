/* tests/test.h — the tiny assertion kit every C test uses. A failed CHECK prints file:line and the
 * expression and makes the test exit 1; TEST_SKIP exits 77, which ctest reports as skipped
 * (SKIP_RETURN_CODE 77). */
#ifndef FGB_TEST_H
#define FGB_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures_;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      test_failures_++;                                                        \
    }                                                                          \
  } while (0)

#define CHECK_MSG(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      test_failures_++;                                                        \
    }                                                                          \
  } while (0)

/* A failure after which the test cannot go on. */
#define REQUIRE(cond)                                                            \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* The same, with a message (printf arguments). */
#define REQUIRE_MSG(cond, ...)                                        \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: REQUIRE failed: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fputc('\n', stderr);                                            \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

#define TEST_SKIP(...)            \
  do {                            \
    fprintf(stderr, "SKIP: ");    \
    fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr);          \
    exit(77);                     \
  } while (0)

#define TEST_DONE()                                                              \
  do {                                                                           \
    if (test_failures_) fprintf(stderr, "%d check(s) failed\n", test_failures_); \
    return test_failures_ ? 1 : 0;                                               \
  } while (0)

#endif
