/*
 * Value and shape checks on tensors, shared by the tensor test programs.
 */
#ifndef FULMEN_TEST_TENSOR_CHECK_H
#define FULMEN_TEST_TENSOR_CHECK_H

#include "check.h"

#include <stdlib.h>

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

#endif
