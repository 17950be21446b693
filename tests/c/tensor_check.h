/*
 * Value and shape checks on tensors, shared by the tensor test programs.
 */
#ifndef FULMEN_TEST_TENSOR_CHECK_H
#define FULMEN_TEST_TENSOR_CHECK_H

#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Compares a tensor's values (read as f64) with `want` within `tol`. */
#define EXPECT_VALUES(t, want, n, tol) expect_values(__LINE__, (t), (want), (n), (tol))
static inline void expect_values(int line, const fulmen_tensor *t, const double *want, size_t n, double tol) {
    int before = check_failed;
    size_t numel = 0;
    CHECK_OK(fulmen_tensor_numel(t, &numel));
    CHECK(numel == n);
    if (numel == n && n > 0) {
        double *got = calloc(n, sizeof(double));
        CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F64, got, n * sizeof(double)));
        for (size_t i = 0; i < n; i++) {
            if (!(fabs(got[i] - want[i]) <= tol)) {
                check_failed++;
                fprintf(stderr, "  value %zu: got %.9g, want %.9g\n", i, got[i], want[i]);
            }
        }
        check_passed++;
        free(got);
    }
    if (check_failed != before) fprintf(stderr, "  (EXPECT_VALUES called from line %d)\n", line);
}

/* Compares a tensor's shape with dims[0..nd]. */
#define EXPECT_SHAPE(t, dims, nd) expect_shape(__LINE__, (t), (dims), (nd))
static inline void expect_shape(int line, const fulmen_tensor *t, const int64_t *dims, size_t nd) {
    int before = check_failed;
    int64_t got[8] = {0};
    size_t got_nd = 99;
    CHECK_OK(fulmen_tensor_shape(t, got, 8, &got_nd));
    CHECK(got_nd == nd);
    for (size_t i = 0; i < nd && i < got_nd; i++) CHECK(got[i] == dims[i]);
    if (check_failed != before) fprintf(stderr, "  (EXPECT_SHAPE called from line %d)\n", line);
}

/* sin(0.1 * i) over a new f32 tensor of `shape`, times `scale`. */
static inline fulmen_tensor *wave(const int64_t *shape, size_t nd, float scale) {
    size_t n = 1;
    for (size_t i = 0; i < nd; i++) n *= (size_t)shape[i];
    float *v = calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = sinf((float)i * 0.1f) * scale;
    fulmen_tensor *t = check_f32(v, n, shape, nd);
    free(v);
    return t;
}

/* sum(v[i] * i) / n: one number that moves when any value or place does. */
static inline double weighted_sum(const fulmen_tensor *t) {
    size_t n = 0;
    CHECK_OK(fulmen_tensor_numel(t, &n));
    if (n == 0) return 0;
    double *v = calloc(n, sizeof(double)), s = 0;
    CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F64, v, n * sizeof(double)));
    for (size_t i = 0; i < n; i++) s += v[i] * (double)i;
    free(v);
    return s / (double)n;
}

#define EXPECT_WS(t, want) expect_ws(__LINE__, (t), (want))
static inline void expect_ws(int line, const fulmen_tensor *t, double want) {
    double got = weighted_sum(t);
    if (!(fabs(got - want) <= 1e-4 * (1 + fabs(want)))) {
        check_failed++;
        fprintf(stderr, "  line %d: weighted sum %.9g, want %.9g\n", line, got, want);
    } else {
        check_passed++;
    }
}

/* Checks the state_dict names of `m` against `want[0..n]`. */
static inline void expect_names(const fulmen_model *m, const char *const *want, size_t n) {
    size_t len = 0;
    CHECK_OK(fulmen_model_state_dict_len(m, &len));
    CHECK(len == n);
    for (size_t i = 0; i < n && i < len; i++) {
        char buf[64] = "";
        size_t got = 0;
        CHECK_OK(fulmen_model_state_dict_name(m, i, buf, sizeof buf, &got));
        if (strcmp(buf, want[i]) != 0) {
            check_failed++;
            fprintf(stderr, "  state_dict[%zu] is \"%s\", want \"%s\"\n", i, buf, want[i]);
        }
    }
}

/* Frees t[0..n] and clears the slots. */
static inline void free_all(fulmen_tensor **t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        fulmen_tensor_free(t[i]);
        t[i] = NULL;
    }
}

#endif
