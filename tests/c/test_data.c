/*
 * Tests of the dataset and loader C API: tensor datasets, CSV loading
 * (headers, label columns, scaling, errors with line numbers), MNIST,
 * subsets and splits, loader lengths, and host data sources / iterators
 * through their vtables (callbacks, errors, userdata lifetime).
 * Loaders cannot be iterated from C without a trainer; iteration is
 * covered by the trainer tests. Host sources are exercised through
 * fulmen_dataset_get.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <stdint.h>
#include <unistd.h>

/* A live handle of another type (a tensor), cast where needed. */
static fulmen_tensor *g_tensor = NULL;
#define WRONG_DS ((fulmen_dataset *)g_tensor)
#define WRONG_LOADER ((fulmen_loader *)g_tensor)

static char g_dir[64] = "/tmp/fulmen_test_data_XXXXXX";

/* ---------------------------------------------------------------- helpers */

static fulmen_dataset *freed_dataset(void) {
    const float v[2] = {1, 2};
    const int64_t d[1] = {2};
    fulmen_tensor *t = check_f32(v, 2, d, 1);
    fulmen_dataset *ds = NULL;
    fulmen_error_free(fulmen_dataset_from_tensors((const fulmen_tensor *const *)&t, 1, &ds));
    fulmen_tensor_free(t);
    fulmen_dataset_free(ds);
    return ds;
}

static fulmen_loader *freed_loader(void) {
    fulmen_dataset *ds = NULL;
    const float v[2] = {1, 2};
    const int64_t d[1] = {2};
    fulmen_tensor *t = check_f32(v, 2, d, 1);
    fulmen_error_free(fulmen_dataset_from_tensors((const fulmen_tensor *const *)&t, 1, &ds));
    fulmen_tensor_free(t);
    fulmen_loader *l = NULL;
    fulmen_error_free(fulmen_loader_new(ds, NULL, &l));
    fulmen_dataset_free(ds);
    fulmen_loader_free(l);
    return l;
}

/* Writes `text` to g_dir/name and the full path to `path`. */
static void write_file(char *path, size_t cap, const char *name, const char *text) {
    snprintf(path, cap, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
}

static size_t ds_len(const fulmen_dataset *ds) {
    size_t n = 12345;
    CHECK_OK(fulmen_dataset_len(ds, &n));
    return n;
}

/* Fetches samples into `out` (capacity 4) and returns how many tensors. */
static size_t ds_get(const fulmen_dataset *ds, const int64_t *idx, size_t n, fulmen_tensor **out) {
    size_t count = 0;
    out[0] = out[1] = out[2] = out[3] = NULL;
    CHECK_OK(fulmen_dataset_get(ds, idx, n, out, 4, &count));
    return count;
}

static void free_all(fulmen_tensor **t, size_t n) {
    for (size_t i = 0; i < n; i++) fulmen_tensor_free(t[i]);
}

/* Compares a tensor's values (as f64) and shape with expectations. */
#define EXPECT_TENSOR(t, dtype, dims, nd, want, n, tol) \
    expect_tensor(__LINE__, (t), (dtype), (dims), (nd), (want), (n), (tol))
static void expect_tensor(int line, const fulmen_tensor *t, int32_t dtype, const int64_t *dims, size_t nd,
                          const double *want, size_t n, double tol) {
    int before = check_failed;
    int32_t dt = -1;
    CHECK_OK(fulmen_tensor_dtype(t, &dt));
    CHECK(dt == dtype);
    int64_t got_dims[8];
    size_t got_nd = 0;
    CHECK_OK(fulmen_tensor_shape(t, got_dims, 8, &got_nd));
    CHECK(got_nd == nd);
    for (size_t i = 0; i < nd && i < got_nd; i++) CHECK(got_dims[i] == dims[i]);
    size_t numel = 0;
    CHECK_OK(fulmen_tensor_numel(t, &numel));
    CHECK(numel == n);
    if (numel == n && want != NULL) {
        double got[64];
        CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F64, got, n * sizeof(double)));
        for (size_t i = 0; i < n; i++) {
            if (!(fabs(got[i] - want[i]) <= tol)) {
                check_failed++;
                fprintf(stderr, "  value %zu: got %.9g, want %.9g\n", i, got[i], want[i]);
            }
        }
    }
    if (check_failed != before) fprintf(stderr, "  (EXPECT_TENSOR called from line %d)\n", line);
}

/* ----------------------------------------------------------- tensor data */

/* from_tensors: samples are rows of every tensor; mismatched first dims,
 * empty lists, scalars, NULL and bad handles fail. The dataset keeps the
 * tensors alive after the host frees its handles. */
static void test_from_tensors(void) {
    const float fv[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int64_t fd[2] = {4, 2}, ld[1] = {4}, l3[1] = {3};
    const int64_t lv[4] = {10, 11, 12, 13};
    fulmen_tensor *x = check_f32(fv, 8, fd, 2), *y = NULL, *y3 = NULL, *s = NULL;
    CHECK_OK(fulmen_tensor_from_data(lv, sizeof lv, FULMEN_DTYPE_I64, ld, 1, &y));
    CHECK_OK(fulmen_tensor_from_data(lv, 3 * sizeof(int64_t), FULMEN_DTYPE_I64, l3, 1, &y3));
    CHECK_OK(fulmen_tensor_scalar(1, FULMEN_DTYPE_F32, &s));
    const fulmen_tensor *xy[2] = {x, y};
    fulmen_dataset *ds = NULL, *bad = NULL;
    CHECK_OK(fulmen_dataset_from_tensors(xy, 2, &ds));
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    CHECK(ds_len(ds) == 4);
    const int64_t idx[3] = {2, 0, 2};
    fulmen_tensor *out[4];
    size_t count = ds_get(ds, idx, 3, out);
    CHECK(count == 2);
    const int64_t d32[2] = {3, 2}, d3[1] = {3};
    const double wx[6] = {5, 6, 1, 2, 5, 6}, wy[3] = {12, 10, 12};
    EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, d32, 2, wx, 6, 0);
    EXPECT_TENSOR(out[1], FULMEN_DTYPE_I64, d3, 1, wy, 3, 0);
    free_all(out, count);
    /* errors of from_tensors */
    x = check_f32(fv, 8, fd, 2);
    const fulmen_tensor *mism[2] = {x, y3};
    CHECK_ERR(fulmen_dataset_from_tensors(mism, 2, &bad), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    const fulmen_tensor *scal[1] = {s};
    CHECK_ERR(fulmen_dataset_from_tensors(scal, 1, &bad), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_dataset_from_tensors(mism, 0, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_from_tensors(NULL, 2, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_from_tensors(mism, 1, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    const fulmen_tensor *with_null[2] = {x, NULL};
    CHECK_ERR(fulmen_dataset_from_tensors(with_null, 2, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    const fulmen_tensor *with_wrong[2] = {x, (const fulmen_tensor *)ds};
    CHECK_ERR(fulmen_dataset_from_tensors(with_wrong, 2, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    fulmen_tensor *gone = check_f32(fv, 4, ld, 1);
    fulmen_tensor_free(gone);
    const fulmen_tensor *with_freed[2] = {x, gone};
    CHECK_ERR(fulmen_dataset_from_tensors(with_freed, 2, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(bad == NULL);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y3);
    fulmen_tensor_free(s);
    fulmen_dataset_free(ds);
}

/* dataset_len / dataset_get bad inputs: small capacity (OUT_OF_RANGE),
 * indices out of range, NULL pointers, freed and wrong-type handles. */
static void test_get_errors(void) {
    const float fv[6] = {1, 2, 3, 4, 5, 6};
    const int64_t fd[2] = {3, 2};
    fulmen_tensor *x = check_f32(fv, 6, fd, 2);
    const fulmen_tensor *xx[2] = {x, x};
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_tensors(xx, 2, &ds));
    fulmen_tensor_free(x);
    size_t live = fulmen_live_handles();
    fulmen_tensor *out[4] = {NULL, NULL, NULL, NULL};
    size_t count = 99;
    const int64_t ok[1] = {1}, big[1] = {3}, neg[1] = {-1};
    CHECK_ERR(fulmen_dataset_get(ds, ok, 1, out, 1, &count), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(fulmen_live_handles() == live); /* nothing leaked on failure */
    CHECK(out[0] == NULL);
    CHECK_ERR(fulmen_dataset_get(ds, big, 1, out, 4, &count), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_dataset_get(ds, neg, 1, out, 4, &count), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_dataset_get(ds, NULL, 1, out, 4, &count), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_get(ds, ok, 1, NULL, 4, &count), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_get(ds, ok, 1, out, 4, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_get(NULL, ok, 1, out, 4, &count), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_get(WRONG_DS, ok, 1, out, 4, &count), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_dataset_get(freed_dataset(), ok, 1, out, 4, &count), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(out[0] == NULL && out[1] == NULL);
    CHECK(fulmen_live_handles() == live);
    size_t n = 0;
    CHECK_ERR(fulmen_dataset_len(ds, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_len(NULL, &n), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_len(WRONG_DS, &n), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_dataset_len(freed_dataset(), &n), FULMEN_CODE_INVALID_HANDLE, NULL);
    /* exact capacity works */
    CHECK_OK(fulmen_dataset_get(ds, ok, 1, out, 2, &count));
    CHECK(count == 2);
    free_all(out, count);
    fulmen_dataset_free(ds);
    fulmen_dataset_free(ds); /* double free: ignored */
    fulmen_dataset_free(NULL);
    fulmen_dataset_free(WRONG_DS); /* a tensor: must stay alive */
    CHECK_OK(fulmen_tensor_numel(g_tensor, &n));
}

/* subset and split_every: the right samples, parents kept alive, k = 0
 * and offsets >= k fail. */
static void test_subset_split(void) {
    float fv[10];
    for (int i = 0; i < 10; i++) fv[i] = (float)i;
    const int64_t fd[1] = {10};
    fulmen_tensor *x = check_f32(fv, 10, fd, 1);
    fulmen_dataset *ds = NULL, *sub = NULL, *every = NULL, *rest = NULL, *bad = NULL, *bad2 = NULL;
    CHECK_OK(fulmen_dataset_from_tensors((const fulmen_tensor *const *)&x, 1, &ds));
    fulmen_tensor_free(x);
    const int64_t pick[3] = {7, 2, 7};
    CHECK_OK(fulmen_dataset_subset(ds, pick, 3, &sub));
    CHECK_OK(fulmen_dataset_split_every(ds, 3, 1, &every, &rest));
    fulmen_dataset_free(ds); /* the derived datasets keep it alive */
    CHECK(ds_len(sub) == 3);
    CHECK(ds_len(every) == 3 && ds_len(rest) == 7);
    fulmen_tensor *out[4];
    const int64_t all3[3] = {0, 1, 2}, all7[7] = {0, 1, 2, 3, 4, 5, 6};
    const int64_t d3[1] = {3}, d7[1] = {7};
    const double wsub[3] = {7, 2, 7}, wev[3] = {1, 4, 7}, wrest[7] = {0, 2, 3, 5, 6, 8, 9};
    size_t c = ds_get(sub, all3, 3, out);
    CHECK(c == 1);
    EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, d3, 1, wsub, 3, 0);
    free_all(out, c);
    c = ds_get(every, all3, 3, out);
    EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, d3, 1, wev, 3, 0);
    free_all(out, c);
    c = ds_get(rest, all7, 7, out);
    EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, d7, 1, wrest, 7, 0);
    free_all(out, c);
    /* a subset of a subset */
    fulmen_dataset *subsub = NULL;
    const int64_t one[1] = {1};
    CHECK_OK(fulmen_dataset_subset(sub, one, 1, &subsub));
    const int64_t zero[1] = {0};
    c = ds_get(subsub, zero, 1, out); /* index 0 of {2} */
    const int64_t d1[1] = {1};
    const double w2[1] = {2};
    EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, d1, 1, w2, 1, 0);
    free_all(out, c);
    fulmen_dataset_free(subsub);
    /* errors */
    const int64_t oob[2] = {0, 3}, negi[1] = {-1};
    CHECK_ERR(fulmen_dataset_subset(sub, oob, 2, &bad), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_dataset_subset(sub, negi, 1, &bad), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_dataset_subset(sub, NULL, 1, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_subset(sub, one, 1, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_subset(NULL, one, 1, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_subset(WRONG_DS, one, 1, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_dataset_subset(freed_dataset(), one, 1, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_dataset_split_every(rest, 0, 0, &bad, &bad2), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_split_every(rest, 3, 3, &bad, &bad2), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_split_every(rest, 3, 0, NULL, &bad2), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_split_every(rest, 3, 0, &bad, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_split_every(NULL, 3, 0, &bad, &bad2), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_split_every(WRONG_DS, 3, 0, &bad, &bad2), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_dataset_split_every(freed_dataset(), 3, 0, &bad, &bad2), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(bad == NULL && bad2 == NULL);
    fulmen_dataset_free(sub);
    fulmen_dataset_free(every);
    fulmen_dataset_free(rest);
}

/* A scaler fitted on a training split scales another split with the
 * training statistics (readable); a column of integers or out of range is
 * refused. */
static void test_scaler(void) {
    const float train_x[6] = {0, 3, 5, 3, 10, 3}, val_x[4] = {5, 3, 15, 7};
    const int64_t d32[2] = {3, 2}, d22[2] = {2, 2}, d2[1] = {2};
    fulmen_tensor *tx = check_f32(train_x, 6, d32, 2), *vx = check_f32(val_x, 4, d22, 2);
    fulmen_dataset *train = NULL, *val = NULL, *scaled = NULL;
    CHECK_OK(fulmen_dataset_from_tensors((const fulmen_tensor *const *)&tx, 1, &train));
    CHECK_OK(fulmen_dataset_from_tensors((const fulmen_tensor *const *)&vx, 1, &val));
    fulmen_tensor_free(tx);
    fulmen_tensor_free(vx);
    fulmen_scaler *s = NULL, *bad = NULL;
    CHECK_OK(fulmen_scaler_fit(train, 0, FULMEN_SCALER_KIND_STANDARDIZE, &s));
    fulmen_tensor *mean = NULL, *std = NULL;
    CHECK_OK(fulmen_scaler_stats(s, &mean, &std));
    const double wmean[2] = {5, 3}, wstd[2] = {sqrt(50.0 / 3.0), 0};
    EXPECT_TENSOR(mean, FULMEN_DTYPE_F64, d2, 1, wmean, 2, 0);
    EXPECT_TENSOR(std, FULMEN_DTYPE_F64, d2, 1, wstd, 2, 1e-12);
    CHECK_OK(fulmen_scaler_apply(s, val, &scaled));
    fulmen_scaler_free(s); /* the scaled dataset keeps the statistics */
    fulmen_dataset_free(val);
    fulmen_tensor *out[4];
    const int64_t both[2] = {0, 1};
    size_t c = ds_get(scaled, both, 2, out);
    const double want[4] = {0, 0, 10 / sqrt(50.0 / 3.0), 0}; /* the constant feature stays 0 */
    EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, d22, 2, want, 4, 1e-6);
    free_all(out, c);
    CHECK_ERR(fulmen_scaler_fit(train, 1, FULMEN_SCALER_KIND_MIN_MAX, &bad), FULMEN_CODE_INVALID_ARGUMENT, "column 1");
    CHECK_ERR(fulmen_scaler_fit(train, 0, 9, &bad), FULMEN_CODE_INVALID_ARGUMENT, "fulmen_scaler_kind");
    CHECK(bad == NULL);
    fulmen_tensor_free(mean);
    fulmen_tensor_free(std);
    fulmen_dataset_free(scaled);
    fulmen_dataset_free(train);
}

/* random_split: torch's parts for a seed (torch.utils.data.random_split
 * with torch.Generator().manual_seed(7): [5, 0, 3, 4, 1], [7, 9, 6],
 * [8, 2]); counts that do not add up and a small capacity fail. */
static void test_random_split(void) {
    float fv[10];
    for (int i = 0; i < 10; i++) fv[i] = (float)i;
    const int64_t fd[1] = {10};
    fulmen_tensor *x = check_f32(fv, 10, fd, 1);
    fulmen_dataset *ds = NULL, *parts[3] = {NULL, NULL, NULL};
    CHECK_OK(fulmen_dataset_from_tensors((const fulmen_tensor *const *)&x, 1, &ds));
    fulmen_tensor_free(x);
    const double fractions[3] = {0.5, 0.3, 0.2}, counts[2] = {6, 5};
    size_t n = 0;
    CHECK_ERR(fulmen_dataset_random_split(ds, fractions, 3, 7, parts, 2, &n), FULMEN_CODE_OUT_OF_RANGE, "capacity");
    CHECK(n == 3 && parts[0] == NULL);
    CHECK_ERR(fulmen_dataset_random_split(ds, counts, 2, 7, parts, 3, &n), FULMEN_CODE_INVALID_ARGUMENT, "sum to 11");
    CHECK_ERR(fulmen_dataset_random_split(ds, NULL, 2, 7, parts, 3, &n), FULMEN_CODE_NULL_ARGUMENT, "lengths");
    CHECK_OK(fulmen_dataset_random_split(ds, fractions, 3, 7, parts, 3, &n));
    fulmen_dataset_free(ds); /* the parts keep it alive */
    CHECK(n == 3 && ds_len(parts[0]) == 5 && ds_len(parts[1]) == 3 && ds_len(parts[2]) == 2);
    fulmen_tensor *out[4];
    const int64_t all5[5] = {0, 1, 2, 3, 4}, d5[1] = {5};
    const double w[5] = {5, 0, 3, 4, 1};
    size_t c = ds_get(parts[0], all5, 5, out);
    EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, d5, 1, w, 5, 0);
    free_all(out, c);
    for (int i = 0; i < 3; i++) fulmen_dataset_free(parts[i]);
}

/* ------------------------------------------------------------------- CSV */

/* Loads a CSV with the given options; NULL on error (reported). */
static fulmen_dataset *csv(const char *path, const fulmen_csv_options *o) {
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_csv(path, o, &ds));
    return ds;
}

/* Fetches every sample of a dataset of at most 8 rows. */
static size_t get_all(const fulmen_dataset *ds, fulmen_tensor **out) {
    const int64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    size_t n = ds_len(ds);
    return n <= 8 ? ds_get(ds, idx, n, out) : 0;
}

/* Default options; header detection; explicit header on / off; label
 * column 0 and -1; no labels; another delimiter; CRLF line ends. */
static void test_csv_layouts(void) {
    fulmen_csv_options o = fulmen_csv_options_default();
    CHECK(o.has_labels && o.label_column == 0 && o.header == -1 && o.delimiter == ',');
    CHECK(o.scaling == FULMEN_SCALING_NONE && o.scale_divisor == 1.0);
    char with_header[128], no_header[128], last[128], semi[128], crlf[128];
    write_file(with_header, sizeof with_header, "h.csv", "label,a,b\n0,1,2\n1,3,4\n2,5,6\n");
    write_file(no_header, sizeof no_header, "n.csv", "0,1,2\n1,3,4\n2,5,6\n");
    write_file(last, sizeof last, "last.csv", "a,b,label\n1,2,0\n3,4,1\n5,6,2\n");
    write_file(semi, sizeof semi, "semi.csv", "0;1;2\n1;3;4\n2;5;6\n");
    write_file(crlf, sizeof crlf, "crlf.csv", "label,a,b\r\n0,1,2\r\n1,3,4\r\n2,5,6\r\n");
    const int64_t fd[2] = {3, 2}, ld[1] = {3}, all_d[2] = {3, 3};
    const double feats[6] = {1, 2, 3, 4, 5, 6}, labels[3] = {0, 1, 2};
    const char *paths[5] = {with_header, no_header, last, semi, crlf};
    for (int k = 0; k < 5; k++) {
        int before = check_failed;
        fulmen_csv_options ok = fulmen_csv_options_default();
        if (k == 2) ok.label_column = -1;
        if (k == 3) ok.delimiter = ';';
        fulmen_dataset *ds = k == 0 ? csv(paths[k], NULL) : csv(paths[k], &ok);
        if (ds == NULL) continue;
        CHECK(ds_len(ds) == 3);
        fulmen_tensor *out[4];
        size_t c = get_all(ds, out);
        CHECK(c == 2);
        if (c == 2) {
            EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, fd, 2, feats, 6, 0);
            EXPECT_TENSOR(out[1], FULMEN_DTYPE_I64, ld, 1, labels, 3, 0);
        }
        free_all(out, c);
        fulmen_dataset_free(ds);
        if (check_failed != before) fprintf(stderr, "  (csv layout %d: %s)\n", k, paths[k]);
    }
    /* explicit header flags */
    fulmen_csv_options h1 = fulmen_csv_options_default(), h0 = fulmen_csv_options_default();
    h1.header = 1;
    h0.header = 0;
    fulmen_dataset *ds = csv(no_header, &h1); /* the first row is skipped */
    if (ds != NULL) {
        CHECK(ds_len(ds) == 2);
        fulmen_dataset_free(ds);
    }
    ds = NULL;
    CHECK_ERR(fulmen_dataset_from_csv(with_header, &h0, &ds), FULMEN_CODE_FORMAT, "line 1");
    CHECK(ds == NULL);
    /* no labels: every column is a feature */
    fulmen_csv_options nl = fulmen_csv_options_default();
    nl.has_labels = false;
    ds = csv(no_header, &nl);
    if (ds != NULL) {
        fulmen_tensor *out[4];
        size_t c = get_all(ds, out);
        CHECK(c == 1);
        const double allv[9] = {0, 1, 2, 1, 3, 4, 2, 5, 6};
        if (c == 1) EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, all_d, 2, allv, 9, 0);
        free_all(out, c);
        fulmen_dataset_free(ds);
    }
    /* a label column in the middle */
    fulmen_csv_options mid = fulmen_csv_options_default();
    mid.label_column = 1;
    char midp[128];
    write_file(midp, sizeof midp, "mid.csv", "1,0,2\n3,1,4\n");
    ds = csv(midp, &mid);
    if (ds != NULL) {
        fulmen_tensor *out[4];
        size_t c = get_all(ds, out);
        const int64_t d22[2] = {2, 2}, d2[1] = {2};
        const double f[4] = {1, 2, 3, 4}, l[2] = {0, 1};
        if (c == 2) {
            EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, d22, 2, f, 4, 0);
            EXPECT_TENSOR(out[1], FULMEN_DTYPE_I64, d2, 1, l, 2, 0);
        }
        free_all(out, c);
        fulmen_dataset_free(ds);
    }
    unlink(with_header);
    unlink(no_header);
    unlink(last);
    unlink(semi);
    unlink(crlf);
    unlink(midp);
}

/* Scaling: divide, per-column min-max to [0, 1] and standardisation to
 * mean 0 / unit variance; a constant column does not produce NaN. */
static void test_csv_scaling(void) {
    char p[128];
    write_file(p, sizeof p, "scale.csv", "0,0,10,7\n1,5,20,7\n0,10,60,7\n");
    const int64_t fd[2] = {3, 3};
    fulmen_csv_options o = fulmen_csv_options_default();
    o.header = 0;
    o.scaling = FULMEN_SCALING_DIVIDE;
    o.scale_divisor = 10;
    fulmen_dataset *ds = csv(p, &o);
    fulmen_tensor *out[4];
    size_t c = 0;
    if (ds != NULL) {
        c = get_all(ds, out);
        const double w[9] = {0, 1, 0.7, 0.5, 2, 0.7, 1, 6, 0.7};
        EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, fd, 2, w, 9, 1e-6);
        const int64_t ld[1] = {3};
        const double l[3] = {0, 1, 0};
        EXPECT_TENSOR(out[1], FULMEN_DTYPE_I64, ld, 1, l, 3, 0); /* labels are not scaled */
        free_all(out, c);
        fulmen_dataset_free(ds);
    }
    o.scaling = FULMEN_SCALING_MIN_MAX;
    ds = csv(p, &o);
    if (ds != NULL) {
        c = get_all(ds, out);
        const double w[9] = {0, 0, 0, 0.5, 0.2, 0, 1, 1, 0};
        EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, fd, 2, w, 9, 1e-6);
        free_all(out, c);
        fulmen_dataset_free(ds);
    }
    o.scaling = FULMEN_SCALING_STANDARDIZE;
    ds = csv(p, &o);
    if (ds != NULL) {
        c = get_all(ds, out);
        double v[9] = {0};
        CHECK_OK(fulmen_tensor_copy_to(out[0], FULMEN_DTYPE_F64, v, sizeof v));
        for (int col = 0; col < 3; col++) {
            double mean = (v[col] + v[3 + col] + v[6 + col]) / 3;
            CHECK_NEAR(mean, 0, 1e-6);
            CHECK(!isnan(v[col]) && !isnan(v[3 + col]) && !isnan(v[6 + col]));
        }
        /* column 0 is {0, 5, 10}: symmetric around its mean */
        CHECK_NEAR(v[0], -v[6], 1e-6);
        CHECK_NEAR(v[3], 0, 1e-6);
        /* unit variance, population (sklearn) or sample (n-1) convention */
        double var_pop = (v[0] * v[0] + v[3] * v[3] + v[6] * v[6]) / 3;
        CHECK(fabs(var_pop - 1) < 1e-5 || fabs(var_pop * 3 / 2 - 1) < 1e-5);
        CHECK(v[2] == 0 && v[5] == 0 && v[8] == 0); /* constant column */
        free_all(out, c);
        fulmen_dataset_free(ds);
    }
    /* bad options */
    fulmen_dataset *bad = NULL;
    o.scaling = FULMEN_SCALING_DIVIDE;
    o.scale_divisor = 0;
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    o.scale_divisor = NAN;
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    o.scaling = 4;
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    o.scaling = -1;
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    o = fulmen_csv_options_default();
    o.header = 2;
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    o = fulmen_csv_options_default();
    o.label_column = 4;
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_OUT_OF_RANGE, NULL);
    o.label_column = -5;
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(bad == NULL);
    unlink(p);
}

/* scikit-learn's layout (a count line first) and columns chosen by name or
 * index; a missing value names its line and column. */
static void test_csv_columns(void) {
    char p[128], gaps[128];
    write_file(p, sizeof p, "named.csv", "2,4,a,b\nage,income,city,bought\n30,1000,7,1\n40,2500,3,0\n");
    fulmen_csv_options o = fulmen_csv_options_default();
    o.skip_rows = 1;
    o.label_name = "bought";
    o.feature_columns = "income, 0";
    fulmen_dataset *ds = csv(p, &o);
    fulmen_tensor *out[4];
    if (ds != NULL) {
        size_t c = get_all(ds, out);
        const int64_t fd[2] = {2, 2}, ld[1] = {2};
        const double w[4] = {1000, 30, 2500, 40}, l[2] = {1, 0};
        EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, fd, 2, w, 4, 0);
        EXPECT_TENSOR(out[1], FULMEN_DTYPE_I64, ld, 1, l, 2, 0);
        free_all(out, c);
        fulmen_dataset_free(ds);
    }
    fulmen_dataset *bad = NULL;
    o.feature_columns = "income,,age";
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "empty name");
    o.feature_columns = "price";
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "no column named \"price\"");
    o.feature_columns = "bought";
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "is the label");
    o.feature_columns = NULL;
    o.skip_rows = 0; /* the count line is then the header, which lacks the name */
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    o.label_name = "\xff";
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "UTF-8");
    o.label_name = "bought";
    o.has_labels = false;
    CHECK_ERR(fulmen_dataset_from_csv(p, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "has_labels");
    write_file(gaps, sizeof gaps, "gaps.csv", "a,b,label\n1,2,0\n3,,1\n");
    o = fulmen_csv_options_default();
    o.label_column = -1;
    CHECK_ERR(fulmen_dataset_from_csv(gaps, &o, &bad), FULMEN_CODE_FORMAT, "line 3: column 2 (\"b\"): a missing value");
    CHECK(bad == NULL);
    unlink(p);
    unlink(gaps);
}

/* Malformed files: ragged rows, non-numbers, non-integer labels and empty
 * files are FORMAT errors naming the file and line; a missing file is IO. */
static void test_csv_errors(void) {
    char ragged[128], text[128], flabel[128], empty[128], missing[160], hdr_only[128];
    write_file(ragged, sizeof ragged, "ragged.csv", "0,1,2\n1,3,4\n2,5\n");
    write_file(text, sizeof text, "text.csv", "0,1,2\n1,x,4\n");
    write_file(flabel, sizeof flabel, "flabel.csv", "0,1,2\n1.5,3,4\n");
    write_file(empty, sizeof empty, "empty.csv", "");
    write_file(hdr_only, sizeof hdr_only, "hdr.csv", "label,a,b\n");
    snprintf(missing, sizeof missing, "%s/missing.csv", g_dir);
    fulmen_dataset *ds = NULL;
    CHECK_ERR(fulmen_dataset_from_csv(ragged, NULL, &ds), FULMEN_CODE_FORMAT, "line 3");
    CHECK_ERR(fulmen_dataset_from_csv(ragged, NULL, &ds), FULMEN_CODE_FORMAT, "ragged.csv");
    CHECK_ERR(fulmen_dataset_from_csv(text, NULL, &ds), FULMEN_CODE_FORMAT, "line 2");
    CHECK_ERR(fulmen_dataset_from_csv(flabel, NULL, &ds), FULMEN_CODE_FORMAT, "line 2");
    CHECK_ERR(fulmen_dataset_from_csv(empty, NULL, &ds), FULMEN_CODE_FORMAT, NULL);
    CHECK_ERR(fulmen_dataset_from_csv(hdr_only, NULL, &ds), FULMEN_CODE_FORMAT, NULL);
    CHECK_ERR(fulmen_dataset_from_csv(missing, NULL, &ds), FULMEN_CODE_IO, "missing.csv");
    CHECK_ERR(fulmen_dataset_from_csv(g_dir, NULL, &ds), FULMEN_CODE_IO, NULL);
    CHECK_ERR(fulmen_dataset_from_csv(NULL, NULL, &ds), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_dataset_from_csv(ragged, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(ds == NULL);
    unlink(ragged);
    unlink(text);
    unlink(flabel);
    unlink(empty);
    unlink(hdr_only);
}

/* MNIST (5000 rows, label last): pixels / 255 in [0, 1], labels 0..9 with
 * 500 of each; split_every(5) gives a 1000 / 4000 holdout. */
static void test_mnist(void) {
    const char *path = getenv("FULMEN_MNIST");
    if (path == NULL) {
        printf("test_data: FULMEN_MNIST not set, MNIST test skipped\n");
        return;
    }
    fulmen_csv_options o = fulmen_csv_options_default();
    o.label_column = -1;
    o.scaling = FULMEN_SCALING_DIVIDE;
    o.scale_divisor = 255;
    fulmen_dataset *ds = csv(path, &o), *every = NULL, *rest = NULL;
    if (ds == NULL) return;
    CHECK(ds_len(ds) == 5000);
    int64_t *idx = malloc(5000 * sizeof(int64_t));
    for (int i = 0; i < 5000; i++) idx[i] = i;
    fulmen_tensor *out[4];
    size_t c = ds_get(ds, idx, 5000, out);
    CHECK(c == 2);
    if (c == 2) {
        const int64_t fd[2] = {5000, 784}, ld[1] = {5000};
        EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, fd, 2, NULL, 5000 * 784, 0);
        EXPECT_TENSOR(out[1], FULMEN_DTYPE_I64, ld, 1, NULL, 5000, 0);
        fulmen_tensor *mx = NULL, *mn = NULL;
        CHECK_OK(fulmen_tensor_max(out[0], &mx));
        CHECK_OK(fulmen_tensor_min(out[0], &mn));
        CHECK(check_item(mx) <= 1.0 && check_item(mx) > 0.9 && check_item(mn) == 0.0);
        fulmen_tensor_free(mx);
        fulmen_tensor_free(mn);
        int64_t *labels = malloc(5000 * sizeof(int64_t));
        CHECK_OK(fulmen_tensor_copy_to(out[1], FULMEN_DTYPE_I64, labels, 5000 * sizeof(int64_t)));
        int counts[10] = {0}, outside = 0;
        for (int i = 0; i < 5000; i++) {
            if (labels[i] < 0 || labels[i] > 9) outside++;
            else counts[labels[i]]++;
        }
        CHECK(outside == 0);
        for (int k = 0; k < 10; k++) CHECK(counts[k] == 500);
        free(labels);
    }
    free_all(out, c);
    free(idx);
    CHECK_OK(fulmen_dataset_split_every(ds, 5, 0, &every, &rest));
    CHECK(ds_len(every) == 1000);
    CHECK(ds_len(rest) == 4000);
    fulmen_dataset_free(every);
    fulmen_dataset_free(rest);
    fulmen_dataset_free(ds);
}

/* --------------------------------------------------------------- loaders */

/* pin_memory: the same batches, in pinned memory where CUDA is available
 * (and as they are without it, as torch's DataLoader). */
static void test_loader_pin_memory(void) {
    float fv[12];
    for (int i = 0; i < 12; i++) fv[i] = (float)i;
    const int64_t fd[2] = {6, 2};
    fulmen_tensor *x = check_f32(fv, 12, fd, 2);
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_tensors((const fulmen_tensor *const *)&x, 1, &ds));
    fulmen_tensor_free(x);
    fulmen_accelerator *cuda = NULL;
    bool cuda_here = false;
    CHECK_OK(fulmen_accelerator_get("cuda", &cuda));
    CHECK_OK(fulmen_accelerator_is_available(cuda, &cuda_here));
    fulmen_accelerator_free(cuda);
    fulmen_loader_options o = fulmen_loader_options_default();
    o.batch_size = 4;
    o.shuffle = true;
    o.seed = 3;
    fulmen_loader *plain = NULL, *pinning = NULL;
    CHECK_OK(fulmen_loader_new(ds, &o, &plain));
    o.pin_memory = true;
    CHECK_OK(fulmen_loader_new(ds, &o, &pinning));
    for (size_t b = 0; b < 2; b++) {
        fulmen_tensor *a = NULL, *p = NULL, *d = NULL, *ad = NULL, *mx = NULL;
        size_t n = 0;
        bool pinned = !cuda_here, plain_pinned = true;
        CHECK_OK(fulmen_loader_batch(plain, 1, b, &a, 1, &n));
        CHECK_OK(fulmen_loader_batch(pinning, 1, b, &p, 1, &n));
        CHECK_OK(fulmen_tensor_is_pinned(p, &pinned));
        CHECK_OK(fulmen_tensor_is_pinned(a, &plain_pinned));
        CHECK(pinned == cuda_here && !plain_pinned);
        CHECK_OK(fulmen_tensor_sub(a, p, &d));
        CHECK_OK(fulmen_tensor_abs(d, &ad));
        CHECK_OK(fulmen_tensor_max(ad, &mx));
        CHECK(check_item(mx) == 0);
        fulmen_tensor_free(mx);
        fulmen_tensor_free(ad);
        fulmen_tensor_free(d);
        fulmen_tensor_free(p);
        fulmen_tensor_free(a);
    }
    bool out = true;
    CHECK_ERR(fulmen_tensor_is_pinned(NULL, &out), FULMEN_CODE_NULL_ARGUMENT, NULL);
    fulmen_loader_free(pinning);
    fulmen_loader_free(plain);
    fulmen_dataset_free(ds);
}

/* Loader defaults and lengths with and without drop_last; batch size 0
 * fails; bad handles. */
static void test_loader(void) {
    fulmen_loader_options o = fulmen_loader_options_default();
    CHECK(o.batch_size == 1 && !o.shuffle && !o.drop_last && !o.pin_memory);
    float fv[10] = {0};
    const int64_t fd[1] = {10};
    fulmen_tensor *x = check_f32(fv, 10, fd, 1);
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_tensors((const fulmen_tensor *const *)&x, 1, &ds));
    fulmen_tensor_free(x);
    fulmen_loader *l = NULL, *bad = NULL;
    size_t n = 0;
    CHECK_OK(fulmen_loader_new(ds, NULL, &l));
    CHECK_OK(fulmen_loader_len(l, &n));
    CHECK(n == 10);
    fulmen_loader_free(l);
    struct {
        size_t batch;
        bool drop_last;
        size_t want;
    } cases[] = {{3, false, 4}, {3, true, 3}, {5, true, 2}, {20, false, 1}, {20, true, 0}, {10, true, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        o = fulmen_loader_options_default();
        o.batch_size = cases[i].batch;
        o.drop_last = cases[i].drop_last;
        o.shuffle = true;
        o.seed = 7;
        l = NULL;
        n = 999;
        CHECK_OK(fulmen_loader_new(ds, &o, &l));
        CHECK_OK(fulmen_loader_len(l, &n));
        if (n != cases[i].want) fprintf(stderr, "  loader case %zu: len %zu, want %zu\n", i, n, cases[i].want);
        CHECK(n == cases[i].want);
        fulmen_loader_free(l);
    }
    o = fulmen_loader_options_default();
    o.batch_size = 0;
    CHECK_ERR(fulmen_loader_new(ds, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_loader_new(NULL, NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_loader_new(ds, NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_loader_new(WRONG_DS, NULL, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_loader_new(freed_dataset(), NULL, &bad), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(bad == NULL);
    CHECK_ERR(fulmen_loader_len(NULL, &n), FULMEN_CODE_NULL_ARGUMENT, NULL);
    l = NULL;
    CHECK_OK(fulmen_loader_new(ds, NULL, &l));
    fulmen_dataset_free(ds); /* the loader keeps it alive */
    CHECK_OK(fulmen_loader_len(l, &n));
    CHECK(n == 10);
    CHECK_ERR(fulmen_loader_len(l, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_loader_len(WRONG_LOADER, &n), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_loader_len(freed_loader(), &n), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_loader_len((fulmen_loader *)ds, &n), FULMEN_CODE_INVALID_HANDLE, NULL); /* freed dataset */
    fulmen_loader_free(l);
    fulmen_loader_free(l);
    fulmen_loader_free(NULL);
    fulmen_loader_free(WRONG_LOADER);
    CHECK_OK(fulmen_tensor_numel(g_tensor, &n));
}

/* ---------------------------------------------------------- host sources */

/* The state of a host data source. */
typedef struct host_source {
    size_t len;
    int len_calls;
    int get_calls;
    int free_calls;
    int64_t last_indices[8];
    size_t last_n;
    int mode; /* 0: ok, 1: return an error, 2: wrong first dim, 3: push NULL, 4: push nothing */
    int push_null_code;
} host_source;

static fulmen_error *src_len(void *ud, size_t *len_out) {
    host_source *s = ud;
    s->len_calls++;
    *len_out = s->len;
    return NULL;
}

static fulmen_error *src_len_fails(void *ud, size_t *len_out) {
    (void)ud;
    (void)len_out;
    return fulmen_error_new(FULMEN_CODE_IO, "disk on fire");
}

/* Sample i is features {10 i, 10 i + 1} and label i; tensors are made
 * here and released by fulmen when the callback returns. */
static fulmen_error *src_get(void *ud, const int64_t *indices, size_t n, fulmen_batch_builder *batch) {
    host_source *s = ud;
    s->get_calls++;
    s->last_n = n;
    for (size_t i = 0; i < n && i < 8; i++) s->last_indices[i] = indices[i];
    if (s->mode == 1) return fulmen_error_new(FULMEN_CODE_CALLBACK, "get_batch says no");
    if (s->mode == 3) {
        fulmen_error *e = fulmen_batch_builder_push(batch, NULL);
        s->push_null_code = fulmen_error_code(e);
        fulmen_error_free(e);
        e = fulmen_batch_builder_push(NULL, NULL);
        fulmen_error_free(e);
        return NULL;
    }
    if (s->mode == 4) return NULL;
    float f[16];
    int64_t l[8];
    for (size_t i = 0; i < n && i < 8; i++) {
        f[2 * i] = (float)(10 * indices[i]);
        f[2 * i + 1] = (float)(10 * indices[i] + 1);
        l[i] = indices[i];
    }
    const int64_t fd[2] = {(int64_t)n + (s->mode == 2 ? 1 : 0), 2}, ld[1] = {(int64_t)n};
    fulmen_tensor *ft = NULL, *lt = NULL;
    fulmen_error *e = fulmen_tensor_from_data(f, (size_t)fd[0] * 2 * sizeof(float), FULMEN_DTYPE_F32, fd, 2, &ft);
    if (e != NULL) return e;
    e = fulmen_tensor_from_data(l, n * sizeof(int64_t), FULMEN_DTYPE_I64, ld, 1, &lt);
    if (e != NULL) return e;
    e = fulmen_batch_builder_push(batch, ft);
    if (e != NULL) return e;
    return fulmen_batch_builder_push(batch, lt);
}

static void src_free(void *ud) {
    ((host_source *)ud)->free_calls++;
}

static fulmen_data_source_vtable source_vtable(host_source *s) {
    fulmen_data_source_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = s;
    v.userdata_free = src_free;
    v.len = src_len;
    v.get_batch = src_get;
    return v;
}

/* A host data source: len called once at creation, get_batch gets the
 * requested indices, its tensors come back as the batch and are released
 * after the callback; userdata_free runs once, after the dataset and every
 * loader using it are gone. */
static void test_host_source(void) {
    host_source s = {.len = 6};
    fulmen_data_source_vtable v = source_vtable(&s);
    fulmen_dataset *ds = NULL;
    size_t live = fulmen_live_handles();
    CHECK_OK(fulmen_dataset_from_source(&v, &ds));
    CHECK(s.len_calls == 1);
    CHECK(ds_len(ds) == 6 && ds_len(ds) == 6);
    CHECK(s.len_calls == 1);
    const int64_t idx[3] = {5, 0, 3};
    fulmen_tensor *out[4];
    size_t c = ds_get(ds, idx, 3, out);
    CHECK(s.get_calls == 1 && s.last_n == 3);
    CHECK(s.last_indices[0] == 5 && s.last_indices[1] == 0 && s.last_indices[2] == 3);
    CHECK(c == 2);
    const int64_t fd[2] = {3, 2}, ld[1] = {3};
    const double f[6] = {50, 51, 0, 1, 30, 31}, l[3] = {5, 0, 3};
    if (c == 2) {
        EXPECT_TENSOR(out[0], FULMEN_DTYPE_F32, fd, 2, f, 6, 0);
        EXPECT_TENSOR(out[1], FULMEN_DTYPE_I64, ld, 1, l, 3, 0);
    }
    /* the callback's own handles were released: only ds and the outputs */
    CHECK(fulmen_live_handles() == live + 1 + c);
    free_all(out, c);
    /* out-of-range indices never reach the host */
    const int64_t big[1] = {6};
    CHECK_ERR(fulmen_dataset_get(ds, big, 1, out, 4, &c), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(s.get_calls == 1);
    /* a subset and two loaders share the dataset */
    fulmen_dataset *sub = NULL;
    fulmen_loader *l1 = NULL, *l2 = NULL;
    const int64_t pick[2] = {1, 2};
    CHECK_OK(fulmen_dataset_subset(ds, pick, 2, &sub));
    fulmen_loader_options o = fulmen_loader_options_default();
    o.batch_size = 4;
    CHECK_OK(fulmen_loader_new(ds, &o, &l1));
    CHECK_OK(fulmen_loader_new(sub, NULL, &l2));
    size_t n = 0;
    CHECK_OK(fulmen_loader_len(l1, &n));
    CHECK(n == 2);
    CHECK_OK(fulmen_loader_len(l2, &n));
    CHECK(n == 2);
    fulmen_dataset_free(ds);
    CHECK(s.free_calls == 0);
    const int64_t second[1] = {1};
    c = ds_get(sub, second, 1, out); /* subset index 1 -> sample 2 */
    CHECK(s.last_indices[0] == 2);
    free_all(out, c);
    fulmen_dataset_free(sub);
    CHECK(s.free_calls == 0);
    fulmen_loader_free(l1);
    CHECK(s.free_calls == 0);
    fulmen_loader_free(l2);
    CHECK(s.free_calls == 1);
    CHECK(fulmen_live_handles() == live);
}

/* A failing get_batch gives its code and message; a batch with the wrong
 * first dimension is a SHAPE_MISMATCH; pushing NULL is a NULL_ARGUMENT;
 * no handles leak on these paths. */
static void test_host_source_errors(void) {
    host_source s = {.len = 4};
    fulmen_data_source_vtable v = source_vtable(&s);
    fulmen_dataset *ds = NULL;
    CHECK_OK(fulmen_dataset_from_source(&v, &ds));
    size_t live = fulmen_live_handles();
    fulmen_tensor *out[4] = {NULL, NULL, NULL, NULL};
    size_t c = 0;
    const int64_t idx[2] = {0, 1};
    s.mode = 1;
    CHECK_ERR(fulmen_dataset_get(ds, idx, 2, out, 4, &c), FULMEN_CODE_CALLBACK, "get_batch says no");
    s.mode = 2;
    CHECK_ERR(fulmen_dataset_get(ds, idx, 2, out, 4, &c), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    s.mode = 3;
    s.push_null_code = -1;
    fulmen_error *e = fulmen_dataset_get(ds, idx, 2, out, 4, &c);
    CHECK(s.push_null_code == FULMEN_CODE_NULL_ARGUMENT);
    CHECK(e != NULL); /* an empty batch is not a batch */
    fulmen_error_free(e);
    s.mode = 4;
    CHECK_ERR(fulmen_dataset_get(ds, idx, 2, out, 4, &c), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(out[0] == NULL);
    CHECK(fulmen_live_handles() == live);
    CHECK(s.get_calls == 4);
    fulmen_dataset_free(ds);
    CHECK(s.free_calls == 1);

    /* invalid vtables: the host keeps its userdata (no free call) */
    host_source t = {.len = 3};
    fulmen_data_source_vtable bad = source_vtable(&t);
    fulmen_dataset *none = NULL;
    /* (any_thread was appended: a size that ends before it is enough) */
    bad.struct_size = offsetof(fulmen_data_source_vtable, any_thread) - 1;
    CHECK_ERR(fulmen_dataset_from_source(&bad, &none), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    bad.struct_size = 0;
    CHECK_ERR(fulmen_dataset_from_source(&bad, &none), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    bad = source_vtable(&t);
    bad.len = NULL;
    CHECK_ERR(fulmen_dataset_from_source(&bad, &none), FULMEN_CODE_INVALID_ARGUMENT, "len");
    bad = source_vtable(&t);
    bad.get_batch = NULL;
    CHECK_ERR(fulmen_dataset_from_source(&bad, &none), FULMEN_CODE_INVALID_ARGUMENT, "get_batch");
    bad = source_vtable(&t);
    bad.len = src_len_fails;
    CHECK_ERR(fulmen_dataset_from_source(&bad, &none), FULMEN_CODE_IO, "disk on fire");
    CHECK_ERR(fulmen_dataset_from_source(NULL, &none), FULMEN_CODE_NULL_ARGUMENT, NULL);
    bad = source_vtable(&t);
    CHECK_ERR(fulmen_dataset_from_source(&bad, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(none == NULL);
    CHECK(t.free_calls == 0);
    /* a larger struct_size (a newer header) is accepted */
    bad = source_vtable(&t);
    bad.struct_size = sizeof bad + 16;
    CHECK_OK(fulmen_dataset_from_source(&bad, &none));
    fulmen_dataset_free(none);
    CHECK(t.free_calls == 1);
    /* without userdata_free nothing is called */
    bad = source_vtable(&t);
    bad.userdata_free = NULL;
    none = NULL;
    CHECK_OK(fulmen_dataset_from_source(&bad, &none));
    fulmen_dataset_free(none);
    CHECK(t.free_calls == 1);
}

/* ------------------------------------------------------------- iterators */

typedef struct host_iter {
    int free_calls;
    int next_calls;
} host_iter;

static fulmen_error *it_next(void *ud, fulmen_batch_builder *batch, bool *done) {
    (void)batch;
    ((host_iter *)ud)->next_calls++;
    *done = true;
    return NULL;
}

static void it_free(void *ud) {
    ((host_iter *)ud)->free_calls++;
}

static fulmen_iterator_vtable iter_vtable(host_iter *h, int64_t num_batches) {
    fulmen_iterator_vtable v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.userdata = h;
    v.userdata_free = it_free;
    v.next = it_next;
    v.num_batches = num_batches;
    return v;
}

/* Iterator loaders: length known or UNSUPPORTED; bad vtables; userdata
 * freed once with the loader and never on failure. */
static void test_iterator(void) {
    host_iter h = {0, 0};
    fulmen_iterator_vtable v = iter_vtable(&h, -1);
    fulmen_loader *l = NULL, *bad = NULL;
    CHECK_OK(fulmen_loader_from_iterator(&v, &l));
    size_t n = 77;
    CHECK_ERR(fulmen_loader_len(l, &n), FULMEN_CODE_UNSUPPORTED, NULL);
    CHECK(n == 77);
    CHECK(h.next_calls == 0); /* nothing is pulled before iteration */
    fulmen_loader_free(l);
    CHECK(h.free_calls == 1);
    fulmen_loader_free(l);
    CHECK(h.free_calls == 1);
    v = iter_vtable(&h, 7);
    l = NULL;
    CHECK_OK(fulmen_loader_from_iterator(&v, &l));
    CHECK_OK(fulmen_loader_len(l, &n));
    CHECK(n == 7);
    fulmen_loader_free(l);
    CHECK(h.free_calls == 2);
    /* invalid vtables */
    host_iter g = {0, 0};
    fulmen_iterator_vtable b = iter_vtable(&g, 3);
    b.struct_size = sizeof b - 8;
    CHECK_ERR(fulmen_loader_from_iterator(&b, &bad), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    b = iter_vtable(&g, 3);
    b.next = NULL;
    CHECK_ERR(fulmen_loader_from_iterator(&b, &bad), FULMEN_CODE_INVALID_ARGUMENT, "next");
    /* another negative count is either rejected or means "unknown" */
    b = iter_vtable(&g, -5);
    fulmen_error *e = fulmen_loader_from_iterator(&b, &bad);
    if (e != NULL) {
        CHECK(fulmen_error_code(e) == FULMEN_CODE_INVALID_ARGUMENT);
        fulmen_error_free(e);
    } else {
        CHECK_ERR(fulmen_loader_len(bad, &n), FULMEN_CODE_UNSUPPORTED, NULL);
        fulmen_loader_free(bad);
        bad = NULL;
        CHECK(g.free_calls == 1);
        g.free_calls = 0;
    }
    CHECK_ERR(fulmen_loader_from_iterator(NULL, &bad), FULMEN_CODE_NULL_ARGUMENT, NULL);
    b = iter_vtable(&g, 3);
    CHECK_ERR(fulmen_loader_from_iterator(&b, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(bad == NULL);
    CHECK(g.free_calls == 0);
}

int main(void) {
    CHECK_OK(fulmen_manual_seed(0));
    CHECK(mkdtemp(g_dir) != NULL);
    CHECK_OK(fulmen_tensor_zeros(NULL, 0, FULMEN_DTYPE_F32, &g_tensor));
    test_from_tensors();
    test_get_errors();
    test_subset_split();
    test_csv_layouts();
    test_csv_scaling();
    test_csv_errors();
    test_csv_columns();
    test_random_split();
    test_scaler();
    test_mnist();
    test_loader();
    test_loader_pin_memory();
    test_host_source();
    test_host_source_errors();
    test_iterator();
    fulmen_tensor_free(g_tensor);
    CHECK(rmdir(g_dir) == 0);
    return check_finish("test_data");
}
