/*
 * Tests of the generated tensor ops (src/tensor/ops/table.rs): values
 * against PyTorch 2.13's (computed with torch and written here), the
 * one-, two- and many-result conventions, and bad inputs: NULL, freed and
 * wrong-type handles, aliased outputs, small capacities, huge counts,
 * wrong dtypes and shapes.
 */
#include "check.h"
#include "tensor_check.h"

#include <stdint.h>

static fulmen_model *g_model = NULL;
#define WRONG ((fulmen_tensor *)g_model)

/* The [2,3] f32 matrix {{3, 1, 2}, {5, 4, 0}}. */
static fulmen_tensor *x23(void) {
    static const float v[6] = {3, 1, 2, 5, 4, 0};
    static const int64_t d[2] = {2, 3};
    return check_f32(v, 6, d, 2);
}

static fulmen_tensor *f32v(const float *v, size_t n) {
    const int64_t d[1] = {(int64_t)n};
    return check_f32(v, n, d, 1);
}

static fulmen_tensor *i64t(const int64_t *v, size_t n, const int64_t *dims, size_t nd) {
    fulmen_tensor *t = NULL;
    CHECK_OK(fulmen_tensor_from_data(v, n * sizeof(int64_t), FULMEN_DTYPE_I64, dims, nd, &t));
    return t;
}

static void test_selection(void) {
    fulmen_tensor *x = x23(), *v = NULL, *i = NULL, *o = NULL;
    CHECK_OK(fulmen_tensor_topk(x, 2, -1, true, true, &v, &i));
    const double tv[4] = {3, 2, 5, 4}, ti[4] = {0, 2, 0, 1};
    EXPECT_VALUES(v, tv, 4, 0);
    EXPECT_VALUES(i, ti, 4, 0);
    int32_t dt = -1;
    CHECK_OK(fulmen_tensor_dtype(i, &dt));
    CHECK(dt == FULMEN_DTYPE_I64);
    fulmen_tensor_free(v);
    fulmen_tensor_free(i);
    v = i = NULL;
    CHECK_ERR(fulmen_tensor_topk(x, 4, -1, true, true, &v, &i), FULMEN_CODE_OUT_OF_RANGE, "k = 4");
    CHECK_ERR(fulmen_tensor_topk(x, 1, 2, true, true, &v, &i), FULMEN_CODE_OUT_OF_RANGE, "dimension 2");
    CHECK_ERR(fulmen_tensor_topk(x, 1, -1, true, true, &v, &v), FULMEN_CODE_INVALID_ARGUMENT, "same pointer");
    CHECK_ERR(fulmen_tensor_topk(x, 1, -1, true, true, &v, NULL), FULMEN_CODE_NULL_ARGUMENT, "indices");
    CHECK(v == NULL && i == NULL);

    CHECK_OK(fulmen_tensor_sort(x, 0, true, true, &v, &i));
    const double sv[6] = {5, 4, 2, 3, 1, 0}, si[6] = {1, 1, 0, 0, 0, 1};
    EXPECT_VALUES(v, sv, 6, 0);
    EXPECT_VALUES(i, si, 6, 0);
    fulmen_tensor_free(v);
    fulmen_tensor_free(i);
    CHECK_OK(fulmen_tensor_argsort(x, 1, false, false, &o));
    const double as[6] = {1, 2, 0, 2, 1, 0};
    EXPECT_VALUES(o, as, 6, 0);
    fulmen_tensor_free(o);
    CHECK_OK(fulmen_tensor_max_dim(x, 1, false, &v, &i));
    const double mv[2] = {3, 5}, mi[2] = {0, 0};
    EXPECT_VALUES(v, mv, 2, 0);
    EXPECT_VALUES(i, mi, 2, 0);
    fulmen_tensor_free(v);
    fulmen_tensor_free(i);

    /* masks: tril of ones, masked_fill with it, where */
    fulmen_tensor *ones = NULL, *tri = NULL, *mask = NULL, *filled = NULL;
    const int64_t d33[2] = {3, 3};
    CHECK_OK(fulmen_tensor_ones(d33, 2, FULMEN_DTYPE_F32, &ones));
    CHECK_OK(fulmen_tensor_tril(ones, 0, &tri));
    const double tl[9] = {1, 0, 0, 1, 1, 0, 1, 1, 1};
    EXPECT_VALUES(tri, tl, 9, 0);
    CHECK_OK(fulmen_tensor_compare_scalar(tri, 0.0, FULMEN_COMPARE_EQ, &mask));
    CHECK_OK(fulmen_tensor_masked_fill(ones, mask, -1e9, &filled));
    const double mf[9] = {1, -1e9, -1e9, 1, 1, -1e9, 1, 1, 1};
    EXPECT_VALUES(filled, mf, 9, 1);
    CHECK_ERR(fulmen_tensor_masked_fill(ones, tri, 0.0, &o), FULMEN_CODE_DTYPE_MISMATCH, "bool");
    CHECK_ERR(fulmen_tensor_masked_fill(mask, x, 0.0, &o), FULMEN_CODE_DTYPE_MISMATCH, "bool");
    /* x and mask broadcast together, as in torch: a [3] row under a [3, 3] mask. */
    const float row[3] = {1, 2, 3};
    const int64_t d3[1] = {3};
    fulmen_tensor *r = check_f32(row, 3, d3, 1);
    CHECK_OK(fulmen_tensor_masked_fill(r, mask, 0.0, &o));
    const double rb[9] = {1, 0, 0, 1, 2, 0, 1, 2, 3};
    EXPECT_VALUES(o, rb, 9, 0);
    fulmen_tensor_free(o);
    fulmen_tensor_free(r);
    o = NULL;
    CHECK_ERR(fulmen_tensor_tril(x, 0, NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    CHECK_OK(fulmen_tensor_triu(ones, 1, &o));
    const double tu[9] = {0, 1, 1, 0, 0, 1, 0, 0, 0};
    EXPECT_VALUES(o, tu, 9, 0);
    fulmen_tensor_free(o);
    CHECK_OK(fulmen_tensor_where(mask, ones, tri, &o));
    const double wh[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_VALUES(o, wh, 9, 0);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_where(tri, ones, tri, &o), FULMEN_CODE_DTYPE_MISMATCH, "condition");
    CHECK_ERR(fulmen_tensor_where(mask, x, tri, &o), FULMEN_CODE_SHAPE_MISMATCH, NULL);
    fulmen_tensor_free(ones);
    fulmen_tensor_free(tri);
    fulmen_tensor_free(mask);
    fulmen_tensor_free(filled);

    /* one_hot and scatter_add */
    const int64_t cls[2] = {2, 0}, d2[1] = {2};
    fulmen_tensor *c = i64t(cls, 2, d2, 1);
    CHECK_OK(fulmen_tensor_one_hot(c, 3, &o));
    const double oh[6] = {0, 0, 1, 1, 0, 0};
    EXPECT_VALUES(o, oh, 6, 0);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_one_hot(c, 2, &o), FULMEN_CODE_OUT_OF_RANGE, "[0, 2)");
    CHECK_ERR(fulmen_tensor_one_hot(c, INT64_MAX, &o), FULMEN_CODE_SHAPE_MISMATCH, "too many");
    CHECK_ERR(fulmen_tensor_one_hot(x, 3, &o), FULMEN_CODE_DTYPE_MISMATCH, "i64");
    fulmen_tensor_free(c);
    const int64_t idx[4] = {0, 0, 2, 1}, d22[2] = {2, 2};
    const float src[4] = {1, 2, 3, 4};
    fulmen_tensor *index = i64t(idx, 4, d22, 2), *s = check_f32(src, 4, d22, 2), *z = NULL;
    const int64_t d23[2] = {2, 3};
    CHECK_OK(fulmen_tensor_zeros(d23, 2, FULMEN_DTYPE_F32, &z));
    CHECK_OK(fulmen_tensor_scatter_add(z, 1, index, s, &o));
    const double sa[6] = {3, 0, 0, 0, 4, 3};
    EXPECT_VALUES(o, sa, 6, 0);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_scatter(z, 0, index, s, &o), FULMEN_CODE_OUT_OF_RANGE, "index values");
    fulmen_tensor_free(index);
    fulmen_tensor_free(s);
    fulmen_tensor_free(z);
    fulmen_tensor_free(x);
}

static void test_splits(void) {
    fulmen_tensor *r = NULL, *outs[4] = {NULL, NULL, NULL, NULL};
    CHECK_OK(fulmen_tensor_arange(0, 6, 1, FULMEN_DTYPE_F32, &r));
    size_t count = 99;
    CHECK_OK(fulmen_tensor_chunk(r, 4, 0, outs, 4, &count));
    CHECK(count == 3); /* torch.chunk(arange(6), 4) has 3 pieces of 2 */
    for (size_t k = 0; k < count; k++) {
        const double want[2] = {2.0 * (double)k, 2.0 * (double)k + 1};
        EXPECT_VALUES(outs[k], want, 2, 0);
        fulmen_tensor_free(outs[k]);
        outs[k] = NULL;
    }
    CHECK(outs[3] == NULL);
    /* too small: only the count is written */
    count = 0;
    CHECK_ERR(fulmen_tensor_split(r, 1, 0, outs, 4, &count), FULMEN_CODE_OUT_OF_RANGE, "`capacity` is 4");
    CHECK(count == 6 && outs[0] == NULL);
    CHECK_ERR(fulmen_tensor_split(r, 1, 0, outs, 4, NULL), FULMEN_CODE_NULL_ARGUMENT, "count_out");
    CHECK_ERR(fulmen_tensor_split(r, 0, 0, outs, 4, &count), FULMEN_CODE_INVALID_ARGUMENT, "split_size");
    CHECK_ERR(fulmen_tensor_split(r, 2, 0, NULL, 4, &count), FULMEN_CODE_NULL_ARGUMENT, "outs");
    const int64_t sizes[2] = {1, 5}, bad_sizes[2] = {1, 4};
    CHECK_OK(fulmen_tensor_split_sizes(r, sizes, 2, 0, outs, 4, &count));
    CHECK(count == 2);
    const double last[5] = {1, 2, 3, 4, 5};
    EXPECT_VALUES(outs[1], last, 5, 0);
    fulmen_tensor_free(outs[0]);
    fulmen_tensor_free(outs[1]);
    CHECK_ERR(fulmen_tensor_split_sizes(r, bad_sizes, 2, 0, outs, 4, &count), FULMEN_CODE_SHAPE_MISMATCH, "sum to 6");
    /* an empty tensor in INT64_MAX chunks: refused by count, nothing made */
    fulmen_tensor *empty = NULL;
    const int64_t d0[1] = {0};
    CHECK_OK(fulmen_tensor_zeros(d0, 1, FULMEN_DTYPE_F32, &empty));
    CHECK_ERR(fulmen_tensor_chunk(empty, INT64_MAX, 0, outs, 4, &count), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK(count == (size_t)INT64_MAX);
    CHECK_OK(fulmen_tensor_chunk(empty, 2, 0, outs, 4, &count));
    CHECK(count == 2);
    fulmen_tensor_free(outs[0]);
    fulmen_tensor_free(outs[1]);
    fulmen_tensor_free(empty);
    /* unbind of a [2,3] into rows */
    fulmen_tensor *m = NULL;
    const int64_t d23[2] = {2, 3};
    CHECK_OK(fulmen_tensor_reshape(r, d23, 2, &m));
    CHECK_OK(fulmen_tensor_unbind(m, 0, outs, 4, &count));
    CHECK(count == 2);
    const double row1[3] = {3, 4, 5};
    EXPECT_VALUES(outs[1], row1, 3, 0);
    fulmen_tensor_free(outs[0]);
    fulmen_tensor_free(outs[1]);
    /* expand, repeat, flip, roll, unflatten */
    fulmen_tensor *o = NULL, *col = NULL;
    const int64_t d31[2] = {3, 1}, to33[2] = {3, 3}, to_bad[2] = {3, 2}, rep[2] = {2, 1}, huge[3] = {INT64_MAX, 2, 1};
    const float c3[3] = {1, 2, 3};
    col = check_f32(c3, 3, d31, 2);
    CHECK_OK(fulmen_tensor_expand(col, to33, 2, &o));
    const double ex[9] = {1, 1, 1, 2, 2, 2, 3, 3, 3};
    EXPECT_VALUES(o, ex, 9, 0);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_expand(m, to_bad, 2, &o), FULMEN_CODE_SHAPE_MISMATCH, "cannot expand");
    CHECK_OK(fulmen_tensor_repeat(col, rep, 2, &o));
    const int64_t d61[2] = {6, 1};
    EXPECT_SHAPE(o, d61, 2);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_repeat(col, huge, 3, &o), FULMEN_CODE_SHAPE_MISMATCH, "too many");
    CHECK_ERR(fulmen_tensor_repeat(col, rep, 1, &o), FULMEN_CODE_SHAPE_MISMATCH, "fewer");
    const int64_t flip_dims[1] = {1}, twice[2] = {1, -1}, shift[1] = {2};
    CHECK_OK(fulmen_tensor_flip(m, flip_dims, 1, &o));
    const double fl[6] = {2, 1, 0, 5, 4, 3};
    EXPECT_VALUES(o, fl, 6, 0);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_flip(m, twice, 2, &o), FULMEN_CODE_INVALID_ARGUMENT, "twice");
    CHECK_OK(fulmen_tensor_roll(r, shift, 1, NULL, 0, &o));
    const double ro[6] = {4, 5, 0, 1, 2, 3};
    EXPECT_VALUES(o, ro, 6, 0);
    fulmen_tensor_free(o);
    const int64_t uf[2] = {3, -1};
    CHECK_OK(fulmen_tensor_unflatten(r, 0, uf, 2, &o));
    const int64_t d32[2] = {3, 2};
    EXPECT_SHAPE(o, d32, 2);
    fulmen_tensor_free(o);
    fulmen_tensor_free(col);
    fulmen_tensor_free(m);
    fulmen_tensor_free(r);
}

static void test_reductions_and_math(void) {
    fulmen_tensor *x = x23(), *o = NULL;
    CHECK_OK(fulmen_tensor_cumsum(x, 1, &o));
    const double cs[6] = {3, 4, 6, 5, 9, 9};
    EXPECT_VALUES(o, cs, 6, 0);
    fulmen_tensor_free(o);
    const int64_t last[1] = {1}, first[1] = {0};
    CHECK_OK(fulmen_tensor_logsumexp(x, last, 1, false, &o));
    const double lse[2] = {3.4076061, 5.3181753};
    EXPECT_VALUES(o, lse, 2, 1e-6);
    fulmen_tensor_free(o);
    /* Integers are read as f32, as torch.logsumexp(tensor([1, 2, 3])) reads them. */
    fulmen_tensor *ints = NULL;
    CHECK_OK(fulmen_tensor_to_dtype(x, FULMEN_DTYPE_I64, &ints));
    CHECK_OK(fulmen_tensor_logsumexp(ints, last, 1, false, &o));
    EXPECT_VALUES(o, lse, 2, 1e-6);
    fulmen_tensor_free(o);
    fulmen_tensor_free(ints);
    CHECK_OK(fulmen_tensor_var(x, last, 1, true, false, &o));
    const double var[2] = {1, 7};
    EXPECT_VALUES(o, var, 2, 1e-6);
    fulmen_tensor_free(o);
    CHECK_OK(fulmen_tensor_std(x, first, 1, false, false, &o));
    const double sd[3] = {1, 1.5, 1};
    EXPECT_VALUES(o, sd, 3, 1e-6);
    fulmen_tensor_free(o);
    CHECK_OK(fulmen_tensor_amax(x, NULL, 0, false, &o));
    CHECK_NEAR(check_item(o), 5, 0);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_amax(x, last, 1, false, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_cumsum(x, -3, &o), FULMEN_CODE_OUT_OF_RANGE, "dimension -3");

    const float rv[3] = {0.5f, 1.5f, -2.5f};
    fulmen_tensor *rt = f32v(rv, 3);
    CHECK_OK(fulmen_tensor_round(rt, &o));
    const double rd[3] = {0, 2, -2};
    EXPECT_VALUES(o, rd, 3, 0);
    fulmen_tensor_free(o);
    fulmen_tensor_free(rt);

    CHECK_OK(fulmen_tensor_linspace(0, 1, 5, FULMEN_DTYPE_F32, &o));
    const double ls[5] = {0, 0.25, 0.5, 0.75, 1};
    EXPECT_VALUES(o, ls, 5, 0);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_linspace(0, 1, -1, FULMEN_DTYPE_F32, &o), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_tensor_linspace(0, 1, 3, 99, &o), FULMEN_CODE_DTYPE_MISMATCH, NULL);

    const fulmen_tensor *pair[2] = {x, x};
    CHECK_OK(fulmen_tensor_einsum("ij,kj->ik", pair, 2, &o));
    const double ein[4] = {14, 19, 19, 41};
    EXPECT_VALUES(o, ein, 4, 0);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_einsum("ij;kj", pair, 2, &o), FULMEN_CODE_INVALID_ARGUMENT, "equation");
    CHECK_ERR(fulmen_tensor_einsum("ij,jk->ik", pair, 2, &o), FULMEN_CODE_TORCH, NULL);
    CHECK_ERR(fulmen_tensor_einsum(NULL, pair, 2, &o), FULMEN_CODE_NULL_ARGUMENT, "equation");
    CHECK_ERR(fulmen_tensor_einsum("ij->i", pair, 0, &o), FULMEN_CODE_INVALID_ARGUMENT, "at least one");
    const fulmen_tensor *bad[2] = {x, WRONG};
    CHECK_ERR(fulmen_tensor_einsum("ij,kj->ik", bad, 2, &o), FULMEN_CODE_INVALID_HANDLE, "tensors[1]");

    fulmen_tensor *b1 = NULL, *b2 = NULL;
    CHECK_OK(fulmen_tensor_compare_scalar(x, 2.0, FULMEN_COMPARE_GT, &b1));
    CHECK_OK(fulmen_tensor_compare_scalar(x, 4.5, FULMEN_COMPARE_LT, &b2));
    CHECK_OK(fulmen_tensor_logical_and(b1, b2, &o));
    const double la[6] = {1, 0, 0, 0, 1, 0};
    EXPECT_VALUES(o, la, 6, 0);
    fulmen_tensor_free(o);
    fulmen_tensor_free(b1);
    fulmen_tensor_free(b2);
    fulmen_tensor_free(x);
}

static void test_activations(void) {
    const float sp[3] = {-1, 0, 30}, e2[2] = {-1, 0.5f}, hs[4] = {-4, -1, 0.5f, 4}, g4[4] = {1, 2, 0, -1};
    fulmen_tensor *a = f32v(sp, 3), *b = f32v(e2, 2), *c = f32v(hs, 4), *o = NULL;
    CHECK_OK(fulmen_tensor_softplus(a, 2.0, 20.0, &o));
    const double spw[3] = {0.063464, 0.3465736, 30.0};
    EXPECT_VALUES(o, spw, 3, 1e-6);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_softplus(a, 0.0, 20.0, &o), FULMEN_CODE_INVALID_ARGUMENT, "beta");
    CHECK_OK(fulmen_tensor_elu(b, 0.5, &o));
    const double elw[2] = {-0.3160603, 0.5};
    EXPECT_VALUES(o, elw, 2, 1e-6);
    fulmen_tensor_free(o);
    /* no NaN gradient from the branch not taken (x = 100 overflows exp) */
    const float big[1] = {100.0f};
    fulmen_tensor *bx = f32v(big, 1), *ey = NULL, *sy = NULL, *gx = NULL;
    CHECK_OK(fulmen_tensor_set_requires_grad(bx, true));
    CHECK_OK(fulmen_tensor_elu(bx, 1.0, &ey));
    CHECK_OK(fulmen_tensor_softplus(bx, 1.0, 20.0, &sy));
    fulmen_tensor *both = NULL;
    CHECK_OK(fulmen_tensor_add(ey, sy, &both));
    CHECK_OK(fulmen_tensor_backward(both));
    CHECK_OK(fulmen_tensor_grad(bx, &gx));
    CHECK_NEAR(check_item(gx), 2.0, 0);
    fulmen_tensor *h = NULL, *hsp = NULL;
    CHECK_OK(fulmen_tensor_to_dtype(a, FULMEN_DTYPE_F16, &h));
    CHECK_OK(fulmen_tensor_softplus(h, 1.0, 20.0, &hsp)); /* f16 exp(20) would be inf */
    const double hsw[3] = {0.3132617, 0.6931472, 30.0};
    EXPECT_VALUES(hsp, hsw, 3, 1e-3);
    fulmen_tensor *extra[] = {bx, ey, sy, gx, both, h, hsp};
    for (size_t k = 0; k < sizeof extra / sizeof *extra; k++) fulmen_tensor_free(extra[k]);
    CHECK_OK(fulmen_tensor_mish(b, &o));
    const double mw[2] = {-0.3034014, 0.3752452};
    EXPECT_VALUES(o, mw, 2, 1e-6);
    fulmen_tensor_free(o);
    CHECK_OK(fulmen_tensor_gelu_tanh(b, &o));
    const double gw[2] = {-0.158808, 0.345714};
    EXPECT_VALUES(o, gw, 2, 1e-6);
    fulmen_tensor_free(o);
    CHECK_OK(fulmen_tensor_hardswish(c, &o));
    const double hw[4] = {0, -0.3333333, 0.2916667, 4};
    EXPECT_VALUES(o, hw, 4, 1e-6);
    fulmen_tensor_free(o);
    const int64_t d14[2] = {1, 4};
    fulmen_tensor *g = check_f32(g4, 4, d14, 2);
    CHECK_OK(fulmen_tensor_glu(g, -1, &o));
    const double glw[2] = {0.5, 0.5378829};
    EXPECT_VALUES(o, glw, 2, 1e-6);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_glu(b, 1, &o), FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_tensor_glu(a, 0, &o), FULMEN_CODE_SHAPE_MISMATCH, "even");
    const float pv[4] = {-1, 2, -3, -4}, pw[2] = {0.1f, 0.2f}, pw3[3] = {1, 1, 1};
    const int64_t d22[2] = {2, 2};
    fulmen_tensor *px = check_f32(pv, 4, d22, 2), *w = f32v(pw, 2), *w3 = f32v(pw3, 3);
    CHECK_OK(fulmen_tensor_prelu(px, w, &o));
    const double prw[4] = {-0.1, 2, -0.3, -0.8};
    EXPECT_VALUES(o, prw, 4, 1e-6);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_tensor_prelu(px, w3, &o), FULMEN_CODE_SHAPE_MISMATCH, "weight");
    fulmen_tensor_free(px);
    fulmen_tensor_free(w);
    fulmen_tensor_free(w3);
    fulmen_tensor_free(g);
    fulmen_tensor_free(a);
    fulmen_tensor_free(b);
    fulmen_tensor_free(c);
}

static void test_attention(void) {
    fulmen_tensor *ar = NULL, *q = NULL, *k = NULL, *v = NULL, *t = NULL, *o = NULL;
    const int64_t d134[3] = {1, 3, 4}, d132[3] = {1, 3, 2};
    CHECK_OK(fulmen_tensor_arange(0, 12, 1, FULMEN_DTYPE_F32, &ar));
    CHECK_OK(fulmen_tensor_reshape(ar, d134, 3, &t));
    CHECK_OK(fulmen_tensor_mul_scalar(t, 0.1, &q));
    /* k = (arange % 5) / 7 */
    const float kv[12] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1};
    fulmen_tensor *k0 = check_f32(kv, 12, d134, 3);
    CHECK_OK(fulmen_tensor_mul_scalar(k0, 1.0 / 7.0, &k));
    const float vv[6] = {0, 1, 2, 3, 4, 5};
    v = check_f32(vv, 6, d132, 3);
    CHECK_OK(fulmen_tensor_scaled_dot_product_attention(q, k, v, NULL, 0.0, true, 0.0, &o));
    const double causal[6] = {0, 1, 0.9928573, 1.9928573, 2.0431039, 3.0431039};
    EXPECT_VALUES(o, causal, 6, 1e-5);
    fulmen_tensor_free(o);
    const uint8_t mv[9] = {1, 0, 1, 1, 1, 0, 0, 1, 1};
    const int64_t d33[2] = {3, 3};
    fulmen_tensor *mask = NULL;
    CHECK_OK(fulmen_tensor_from_data(mv, 9, FULMEN_DTYPE_BOOL, d33, 2, &mask));
    CHECK_OK(fulmen_tensor_scaled_dot_product_attention(q, k, v, mask, 0.0, false, 0.5, &o));
    const double masked[6] = {1.9500103, 2.9500103, 0.9928573, 1.9928573, 3.0249946, 4.0249949};
    EXPECT_VALUES(o, masked, 6, 1e-5);
    fulmen_tensor_free(o);
    o = NULL;
    CHECK_ERR(fulmen_tensor_scaled_dot_product_attention(q, k, v, mask, 0.0, true, 0.0, &o),
              FULMEN_CODE_INVALID_ARGUMENT, "not both");
    CHECK_ERR(fulmen_tensor_scaled_dot_product_attention(q, k, v, NULL, 1.0, false, 0.0, &o),
              FULMEN_CODE_INVALID_ARGUMENT, "dropout_p");
    CHECK_ERR(fulmen_tensor_scaled_dot_product_attention(q, v, v, NULL, 0.0, false, 0.0, &o),
              FULMEN_CODE_SHAPE_MISMATCH, NULL);
    CHECK_ERR(fulmen_tensor_scaled_dot_product_attention(q, k, v, ar, 0.0, false, 0.0, &o),
              FULMEN_CODE_SHAPE_MISMATCH, "attn_mask");
    CHECK_ERR(fulmen_tensor_scaled_dot_product_attention(q, k, v, WRONG, 0.0, false, 0.0, &o),
              FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(o == NULL);
    fulmen_tensor_free(mask);
    fulmen_tensor_free(k0);
    fulmen_tensor_free(ar);
    fulmen_tensor_free(t);
    fulmen_tensor_free(q);
    fulmen_tensor_free(k);
    fulmen_tensor_free(v);
}

/* One loss value against PyTorch's, within 1e-6. */
#define EXPECT_LOSS(call, want)                                  \
    do {                                                         \
        fulmen_tensor *l_ = NULL;                                \
        CHECK_OK(call);                                          \
        if (l_ != NULL) CHECK_NEAR(check_item(l_), (want), 1e-6); \
        fulmen_tensor_free(l_);                                  \
    } while (0)

static void test_losses(void) {
    const float lv[12] = {1.0f, 2.0f, 0.5f, 0.1f, -1.0f, 2.0f, 0.3f, 0.3f, 0.3f, 2.0f, 1.0f, 0.0f};
    const int64_t d43[2] = {4, 3}, d4[1] = {4};
    const int64_t tv[4] = {1, 2, -100, 0}, tv2[4] = {1, 2, 0, 0}, tv3[4] = {1, 2, 1, 0};
    const float wv[3] = {1.0f, 2.0f, 0.5f};
    fulmen_tensor *logits = check_f32(lv, 12, d43, 2), *w = f32v(wv, 3), *o = NULL;
    fulmen_tensor *target = i64t(tv, 4, d4, 1), *target2 = i64t(tv2, 4, d4, 1), *target3 = i64t(tv3, 4, d4, 1);
    EXPECT_LOSS(fulmen_loss_cross_entropy_with_options(logits, target, w, -100, 0.1, FULMEN_REDUCTION_MEAN, &l_),
                0.522605);
    EXPECT_LOSS(fulmen_loss_cross_entropy_with_options(logits, target2, NULL, -100, 0.2, FULMEN_REDUCTION_SUM, &l_),
                2.845705);
    CHECK_ERR(fulmen_loss_cross_entropy_with_options(logits, target, w, -100, 1.5, FULMEN_REDUCTION_MEAN, &o),
              FULMEN_CODE_INVALID_ARGUMENT, "label_smoothing");
    CHECK_ERR(fulmen_loss_cross_entropy_with_options(logits, target2, target2, -100, 0, FULMEN_REDUCTION_MEAN, &o),
              FULMEN_CODE_DTYPE_MISMATCH, NULL);
    EXPECT_LOSS(fulmen_loss_cross_entropy(logits, target, FULMEN_REDUCTION_SUM, &l_), 1.0537592);
    CHECK_ERR(fulmen_loss_cross_entropy_with_options(logits, target, NULL, 0, 0, FULMEN_REDUCTION_MEAN, &o),
              FULMEN_CODE_OUT_OF_RANGE, NULL);
    CHECK_ERR(fulmen_loss_cross_entropy(logits, target2, FULMEN_REDUCTION_BATCH_MEAN, &o), FULMEN_CODE_INVALID_ARGUMENT,
              "kl_div only");
    fulmen_tensor *lp = NULL;
    CHECK_OK(fulmen_tensor_log_softmax(logits, 1, &lp));
    EXPECT_LOSS(fulmen_loss_nll_with_options(lp, target3, w, 1, FULMEN_REDUCTION_MEAN, &l_), 0.3323321);
    fulmen_tensor *w4 = NULL;
    CHECK_OK(fulmen_tensor_ones(d4, 1, FULMEN_DTYPE_F32, &w4));
    CHECK_ERR(fulmen_loss_nll_with_options(lp, target3, w4, -100, FULMEN_REDUCTION_MEAN, &o), FULMEN_CODE_SHAPE_MISMATCH,
              "weight");

    const float xv[4] = {0.5f, -1.0f, 2.0f, 0.0f}, yv[4] = {1, 0, 0, 1}, ew[2] = {1, 2}, pw[2] = {3, 0.5f};
    const int64_t d22[2] = {2, 2};
    fulmen_tensor *x = check_f32(xv, 4, d22, 2), *y = check_f32(yv, 4, d22, 2), *elw = f32v(ew, 2), *pos = f32v(pw, 2);
    EXPECT_LOSS(fulmen_loss_bce_with_logits_with_options(x, y, elw, pos, FULMEN_REDUCTION_MEAN, &l_), 1.2172074);
    CHECK_ERR(fulmen_loss_bce_with_logits_with_options(x, y, w, NULL, FULMEN_REDUCTION_MEAN, &o),
              FULMEN_CODE_SHAPE_MISMATCH, "does not broadcast");
    fulmen_tensor *p = NULL;
    CHECK_OK(fulmen_tensor_sigmoid(x, &p));
    CHECK_OK(fulmen_loss_bce(p, y, NULL, FULMEN_REDUCTION_NONE, &o));
    const double bce[4] = {0.474077, 0.3132617, 2.1269276, 0.6931472};
    EXPECT_VALUES(o, bce, 4, 1e-6);
    fulmen_tensor_free(o);

    const float av[3] = {0, 1, 3}, bv[3] = {0.5f, -1, 0};
    fulmen_tensor *a = f32v(av, 3), *b = f32v(bv, 3);
    CHECK_OK(fulmen_loss_huber(a, b, 1.5, FULMEN_REDUCTION_NONE, &o));
    const double hub[3] = {0.125, 1.875, 3.375};
    EXPECT_VALUES(o, hub, 3, 1e-6);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_loss_huber(a, b, 0.0, FULMEN_REDUCTION_MEAN, &o), FULMEN_CODE_INVALID_ARGUMENT, "delta");
    EXPECT_LOSS(fulmen_loss_smooth_l1(a, b, 0.5, FULMEN_REDUCTION_MEAN, &l_), 1.5833334);

    const float qv[4] = {0.2f, 0.8f, 1.0f, 0.0f}, kv[4] = {0.3f, 0.7f, 0.5f, 0.5f};
    fulmen_tensor *q0 = check_f32(qv, 4, d22, 2), *q = NULL, *kt = check_f32(kv, 4, d22, 2), *klog = NULL;
    CHECK_OK(fulmen_tensor_log_softmax(q0, 1, &q));
    CHECK_OK(fulmen_tensor_log(kt, &klog));
    EXPECT_LOSS(fulmen_loss_kl_div(q, kt, false, FULMEN_REDUCTION_BATCH_MEAN, &l_), 0.0633691);
    EXPECT_LOSS(fulmen_loss_kl_div(q, klog, true, FULMEN_REDUCTION_MEAN, &l_), 0.0316845);

    const float x1v[4] = {1, 0, 1, 1}, x2v[4] = {0, 1, 1, 0.9f}, lab[2] = {1, -1}, bad_lab[2] = {1, 0};
    fulmen_tensor *x1 = check_f32(x1v, 4, d22, 2), *x2 = check_f32(x2v, 4, d22, 2), *labels = f32v(lab, 2);
    fulmen_tensor *bad_labels = f32v(bad_lab, 2);
    CHECK_OK(fulmen_loss_cosine_embedding(x1, x2, labels, 0.2, FULMEN_REDUCTION_NONE, &o));
    const double cosw[2] = {1.0, 0.7986178};
    EXPECT_VALUES(o, cosw, 2, 1e-6);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_loss_cosine_embedding(x1, x2, bad_labels, 0.2, FULMEN_REDUCTION_MEAN, &o),
              FULMEN_CODE_INVALID_ARGUMENT, "1 or -1");
    const float r1[2] = {1, 2}, r2[2] = {2, 0};
    fulmen_tensor *s1 = f32v(r1, 2), *s2 = f32v(r2, 2);
    CHECK_OK(fulmen_loss_margin_ranking(s1, s2, labels, 0.5, FULMEN_REDUCTION_NONE, &o));
    const double rk[2] = {1.5, 2.5};
    EXPECT_VALUES(o, rk, 2, 1e-6);
    fulmen_tensor_free(o);

    /* CTC: log_softmax(sin(arange(40).reshape(5, 2, 4)), 2) */
    fulmen_tensor *ar = NULL, *sn = NULL, *r3 = NULL, *lpc = NULL;
    const int64_t d524[3] = {5, 2, 4}, d23[2] = {2, 3}, d2[1] = {2};
    CHECK_OK(fulmen_tensor_arange(0, 40, 1, FULMEN_DTYPE_F32, &ar));
    CHECK_OK(fulmen_tensor_reshape(ar, d524, 3, &r3));
    CHECK_OK(fulmen_tensor_sin(r3, &sn));
    CHECK_OK(fulmen_tensor_log_softmax(sn, 2, &lpc));
    const int64_t tgv[6] = {1, 2, 0, 3, 3, 1}, ilv[2] = {5, 4}, tlv[2] = {2, 3}, long_il[2] = {6, 4};
    fulmen_tensor *tg = i64t(tgv, 6, d23, 2), *il = i64t(ilv, 2, d2, 1), *tl = i64t(tlv, 2, d2, 1);
    fulmen_tensor *bad_il = i64t(long_il, 2, d2, 1);
    EXPECT_LOSS(fulmen_loss_ctc(lpc, tg, il, tl, 0, false, FULMEN_REDUCTION_MEAN, &l_), 2.0682495);
    CHECK_OK(fulmen_loss_ctc(lpc, tg, il, tl, 0, false, FULMEN_REDUCTION_NONE, &o));
    const double ctcn[2] = {3.314213, 7.4381771};
    EXPECT_VALUES(o, ctcn, 2, 1e-5);
    fulmen_tensor_free(o);
    CHECK_ERR(fulmen_loss_ctc(lpc, tg, bad_il, tl, 0, false, FULMEN_REDUCTION_MEAN, &o), FULMEN_CODE_OUT_OF_RANGE,
              "input_lengths");
    CHECK_ERR(fulmen_loss_ctc(lpc, tg, il, tl, 4, false, FULMEN_REDUCTION_MEAN, &o), FULMEN_CODE_OUT_OF_RANGE, "blank");
    /* Padding past a target's length is ignored, as torch ignores it (-1
     * here); a label within the length must be a class. */
    const int64_t padded[6] = {1, 2, -1, 3, 3, 1}, wrong[6] = {1, 9, 0, 3, 3, 1};
    fulmen_tensor *tg_pad = i64t(padded, 6, d23, 2), *tg_bad = i64t(wrong, 6, d23, 2);
    EXPECT_LOSS(fulmen_loss_ctc(lpc, tg_pad, il, tl, 0, false, FULMEN_REDUCTION_MEAN, &l_), 2.0682495);
    CHECK_ERR(fulmen_loss_ctc(lpc, tg_bad, il, tl, 0, false, FULMEN_REDUCTION_MEAN, &o), FULMEN_CODE_OUT_OF_RANGE,
              "target labels");
    fulmen_tensor_free(tg_pad);
    fulmen_tensor_free(tg_bad);
    o = NULL;
    fulmen_tensor *all[] = {logits, w, target, target2, target3, lp, w4, x, y, elw, pos, p, a, b, q0, q, kt, klog,
                            x1, x2, labels, bad_labels, s1, s2, ar, sn, r3, lpc, tg, il, tl, bad_il};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) fulmen_tensor_free(all[k]);
}

static void test_bad_handles(void) {
    fulmen_tensor *x = x23(), *o = NULL, *i = NULL, *outs[2];
    fulmen_tensor *freed = x23();
    fulmen_tensor_free(freed);
    size_t count = 0;
    CHECK_ERR(fulmen_tensor_sin(NULL, &o), FULMEN_CODE_NULL_ARGUMENT, "`x`");
    CHECK_ERR(fulmen_tensor_sin(freed, &o), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_sin(WRONG, &o), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_maximum(x, freed, &o), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_sort(freed, 0, false, false, &o, &i), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK_ERR(fulmen_tensor_unbind(WRONG, 0, outs, 2, &count), FULMEN_CODE_INVALID_HANDLE, NULL);
    CHECK(o == NULL && i == NULL);
    fulmen_tensor_free(x);
}

int main(void) {
    CHECK_OK(fulmen_manual_seed(0));
    CHECK_OK(fulmen_model_sequential_new(&g_model));
    test_selection();
    test_splits();
    test_reductions_and_math();
    test_activations();
    test_attention();
    test_losses();
    test_bad_handles();
    fulmen_model_free(g_model);
    return check_finish("test_tensor_ops");
}
