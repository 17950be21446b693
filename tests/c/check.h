/*
 * A tiny test harness for fulmen's C tests: CHECK_OK / CHECK_ERR on
 * fulmen_error* results, CHECK on conditions, and a closing line
 * "N passed, M failed". Every test program ends with check_finish(), which
 * also fails when fulmen handles are still alive (a leak).
 */
#ifndef FULMEN_TEST_CHECK_H
#define FULMEN_TEST_CHECK_H

#include <fulmen.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_passed = 0;
static int check_failed = 0;

/* Records a condition. */
#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (cond) {                                                                 \
            check_passed++;                                                         \
        } else {                                                                    \
            check_failed++;                                                         \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)

/* Expects success; prints and frees the error otherwise. */
#define CHECK_OK(expr)                                                                            \
    do {                                                                                          \
        fulmen_error *check_err_ = (expr);                                                        \
        if (check_err_ == NULL) {                                                                 \
            check_passed++;                                                                       \
        } else {                                                                                  \
            check_failed++;                                                                       \
            fprintf(stderr, "%s:%d: %s failed: %s (code %d)\n", __FILE__, __LINE__, #expr,        \
                    fulmen_error_message(check_err_), fulmen_error_code(check_err_));             \
            fulmen_error_free(check_err_);                                                        \
        }                                                                                         \
    } while (0)

/* Expects an error with the given code whose message contains `needle`
 * (NULL: any message). */
#define CHECK_ERR(expr, code, needle)                                                               \
    do {                                                                                            \
        fulmen_error *check_err_ = (expr);                                                          \
        const char *check_needle_ = (needle);                                                       \
        if (check_err_ == NULL) {                                                                   \
            check_failed++;                                                                         \
            fprintf(stderr, "%s:%d: %s succeeded, expected code %d\n", __FILE__, __LINE__, #expr,    \
                    (int)(code));                                                                   \
        } else if (fulmen_error_code(check_err_) != (int)(code) ||                                  \
                   (check_needle_ != NULL && strstr(fulmen_error_message(check_err_), check_needle_) == NULL)) { \
            check_failed++;                                                                         \
            fprintf(stderr, "%s:%d: %s gave code %d \"%s\", expected code %d containing \"%s\"\n",   \
                    __FILE__, __LINE__, #expr, fulmen_error_code(check_err_),                        \
                    fulmen_error_message(check_err_), (int)(code), check_needle_ ? check_needle_ : ""); \
            fulmen_error_free(check_err_);                                                          \
        } else {                                                                                    \
            check_passed++;                                                                         \
            fulmen_error_free(check_err_);                                                          \
        }                                                                                           \
    } while (0)

/* Checks that two doubles agree within `tol`. */
#define CHECK_NEAR(a, b, tol) CHECK(fabs((double)(a) - (double)(b)) <= (tol))

/* Makes a CPU f32 tensor from literal values. */
static inline fulmen_tensor *check_f32(const float *data, size_t n, const int64_t *shape, size_t ndim) {
    fulmen_tensor *t = NULL;
    fulmen_error *e = fulmen_tensor_from_data(data, n * sizeof(float), FULMEN_DTYPE_F32, shape, ndim, &t);
    if (e != NULL) {
        fprintf(stderr, "check_f32: %s\n", fulmen_error_message(e));
        fulmen_error_free(e);
        exit(2);
    }
    return t;
}

/* Reads a one-element tensor as a double (NAN on error). */
static inline double check_item(const fulmen_tensor *t) {
    double v = NAN;
    fulmen_error *e = fulmen_tensor_item(t, &v);
    if (e != NULL) {
        fprintf(stderr, "check_item: %s\n", fulmen_error_message(e));
        fulmen_error_free(e);
    }
    return v;
}

/* Prints the closing line, checks for leaked handles, returns the exit code. */
static inline int check_finish(const char *name) {
    size_t live = fulmen_live_handles();
    if (live != 0) {
        check_failed++;
        fprintf(stderr, "%s: %zu fulmen handles still alive at exit (leak)\n", name, live);
    }
    printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
    return check_failed == 0 ? 0 : 1;
}

#endif
