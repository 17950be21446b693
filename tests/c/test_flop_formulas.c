/*
 * Tests of fulmen_flops_register_formula: FLOP formulas of the host's own
 * (torch's register_flop_formula, FlopCounterMode's custom_mapping): what a
 * formula sees, its counts by module, replacing torch's formula, refusals,
 * failures, re-entrant calls and when its userdata is freed.
 */
#include "check.h"

#include <stdint.h>
#include <string.h>

/* What the GELU formula saw, and how often userdata was freed. */
typedef struct {
    int calls;
    int input_ok;
    int frees;
} seen;

static uint64_t numel(const fulmen_flop_value *v) {
    uint64_t n = 1;
    for (size_t i = 0; i < v->ndim; i++) n *= (uint64_t)v->shape[i];
    return n;
}

/* aten::gelu(Tensor self, *, str approximate="none"): 8 FLOPs an element. */
static fulmen_error *gelu_formula(void *ud, const char *op, const fulmen_flop_value *in, size_t n_in,
                                  const fulmen_flop_value *out, size_t n_out, uint64_t *flops) {
    seen *s = ud;
    s->calls++;
    s->input_ok = strcmp(op, "aten::gelu") == 0 && n_in == 2 && in[0].kind == FULMEN_FLOP_VALUE_KIND_TENSOR &&
                  in[0].dtype == FULMEN_DTYPE_F32 && in[0].ndim == 2 && in[0].shape[0] == 4 && in[0].shape[1] == 5 &&
                  in[1].kind == FULMEN_FLOP_VALUE_KIND_STRING && strcmp(in[1].text, "none") == 0 && n_out == 1 &&
                  out[0].kind == FULMEN_FLOP_VALUE_KIND_TENSOR && out[0].ndim == 2;
    *flops = 8 * numel(&in[0]);
    return NULL;
}

static void free_seen(void *ud) { ((seen *)ud)->frees++; }

/* Replaces torch's 2 * m * n * k for aten::addmm by one FLOP a call. */
static fulmen_error *one_flop(void *ud, const char *op, const fulmen_flop_value *in, size_t n_in,
                              const fulmen_flop_value *out, size_t n_out, uint64_t *flops) {
    (void)ud, (void)op, (void)in, (void)n_in, (void)out, (void)n_out;
    *flops = 1;
    return NULL;
}

static fulmen_error *failing(void *ud, const char *op, const fulmen_flop_value *in, size_t n_in,
                             const fulmen_flop_value *out, size_t n_out, uint64_t *flops) {
    (void)ud, (void)op, (void)in, (void)n_in, (void)out, (void)n_out, (void)flops;
    return fulmen_error_new(FULMEN_CODE_OUT_OF_RANGE, "no formula for this shape");
}

static fulmen_error *nothing(void *ud) {
    (void)ud;
    return NULL;
}

/* Calls back into fulmen: unregisters itself (allowed; the measurement
 * keeps it) and tries to measure inside the measurement (refused). */
static fulmen_error *reentrant(void *ud, const char *op, const fulmen_flop_value *in, size_t n_in,
                               const fulmen_flop_value *out, size_t n_out, uint64_t *flops) {
    (void)in, (void)n_in, (void)out, (void)n_out;
    seen *s = ud;
    s->calls++;
    bool removed = false;
    fulmen_error *e = fulmen_flops_unregister_formula(op, &removed);
    if (e != NULL) return e;
    if (!removed) return fulmen_error_new(FULMEN_CODE_CALLBACK, "the formula was not registered");
    uint64_t n = 0;
    e = fulmen_measure_flops(nothing, NULL, &n);
    if (e == NULL || fulmen_error_code(e) != FULMEN_CODE_INVALID_STATE) {
        fulmen_error_free(e);
        return fulmen_error_new(FULMEN_CODE_CALLBACK, "a nested measurement was not refused");
    }
    fulmen_error_free(e);
    *flops = 3;
    return NULL;
}

static fulmen_model *linear_gelu(void) {
    fulmen_model *seq = NULL, *lin = NULL, *act = NULL;
    CHECK_OK(fulmen_model_sequential_new(&seq));
    CHECK_OK(fulmen_model_linear_new(3, 5, true, &lin));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_GELU, 0, &act));
    CHECK_OK(fulmen_model_push(seq, lin));
    CHECK_OK(fulmen_model_push(seq, act));
    return seq;
}

/* A formula counts GELU for its module; another replaces torch's addmm. */
static void test_counts(fulmen_model *m, const fulmen_tensor *x) {
    seen s = {0, 0, 0};
    CHECK_OK(fulmen_flops_register_formula("aten::gelu", gelu_formula, &s, free_seen));
    CHECK_OK(fulmen_flops_register_formula("aten::addmm", one_flop, NULL, NULL));
    fulmen_flop_counts *c = NULL;
    CHECK_OK(fulmen_model_measure_flops_by_module(m, x, false, &c));
    CHECK(s.calls == 1 && s.input_ok);
    uint64_t flops = 0;
    CHECK_OK(fulmen_flop_counts_total(c, "Sequential.1", &flops));
    CHECK(flops == 8 * 4 * 5);
    CHECK_OK(fulmen_flop_counts_total(c, "Sequential.0", &flops));
    CHECK(flops == 1);
    CHECK_OK(fulmen_flop_counts_total(c, NULL, &flops));
    CHECK(flops == 8 * 4 * 5 + 1);
    fulmen_flop_counts_free(c);
    bool removed = false;
    CHECK_OK(fulmen_flops_unregister_formula("aten::gelu", &removed));
    CHECK(removed && s.frees == 1);
    CHECK_OK(fulmen_flops_unregister_formula("aten::gelu", &removed));
    CHECK(!removed && s.frees == 1);
    CHECK_OK(fulmen_flops_unregister_formula("aten::addmm", NULL));
    /* torch's formulas again. */
    CHECK_OK(fulmen_model_measure_flops(m, x, false, &flops));
    CHECK(flops == 2 * 4 * 5 * 3 && s.calls == 1);
}

/* Bad targets and arguments leave userdata the host's. */
static void test_refusals(void) {
    seen s = {0, 0, 0};
    CHECK_ERR(fulmen_flops_register_formula(NULL, one_flop, &s, free_seen), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_flops_register_formula("aten::gelu", NULL, &s, free_seen), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_flops_register_formula("aten::linear", one_flop, &s, free_seen), FULMEN_CODE_INVALID_ARGUMENT,
              "decomposes");
    CHECK_ERR(fulmen_flops_register_formula("aten::gelu.out", one_flop, &s, free_seen),
              FULMEN_CODE_INVALID_ARGUMENT, "without an overload");
    CHECK_ERR(fulmen_flops_register_formula("mylib::missing", one_flop, &s, free_seen),
              FULMEN_CODE_INVALID_ARGUMENT, "no operator");
    CHECK_OK(fulmen_flops_register_formula("aten::gelu", one_flop, NULL, NULL));
    CHECK_ERR(fulmen_flops_register_formula("aten::gelu", one_flop, &s, free_seen), FULMEN_CODE_INVALID_STATE,
              "registered already");
    CHECK(s.frees == 0);
    CHECK_OK(fulmen_flops_unregister_formula("aten::gelu", NULL));
    CHECK_ERR(fulmen_flops_unregister_formula(NULL, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK_ERR(fulmen_flops_unregister_formula("gelu", NULL), FULMEN_CODE_INVALID_ARGUMENT, NULL);
}

/* A formula's error fails the measurement; a formula may call fulmen. */
static void test_failures_and_reentry(fulmen_model *m, const fulmen_tensor *x) {
    uint64_t flops = 7;
    CHECK_OK(fulmen_flops_register_formula("aten::gelu", failing, NULL, NULL));
    CHECK_ERR(fulmen_model_measure_flops(m, x, false, &flops), FULMEN_CODE_OUT_OF_RANGE,
              "the FLOP formula registered for aten::gelu failed: no formula for this shape");
    CHECK(flops == 7);
    CHECK_OK(fulmen_flops_unregister_formula("aten::gelu", NULL));

    seen s = {0, 0, 0};
    CHECK_OK(fulmen_flops_register_formula("aten::gelu", reentrant, &s, free_seen));
    CHECK_OK(fulmen_model_measure_flops(m, x, false, &flops));
    CHECK(s.calls == 1 && flops == 2 * 4 * 5 * 3 + 3);
    /* Unregistered by its own call, freed when the measurement ended. */
    CHECK(s.frees == 1);
    bool removed = true;
    CHECK_OK(fulmen_flops_unregister_formula("aten::gelu", &removed));
    CHECK(!removed);
}

int main(void) {
    fulmen_model *m = linear_gelu();
    const int64_t shape[2] = {4, 3};
    fulmen_tensor *x = NULL;
    CHECK_OK(fulmen_tensor_ones(shape, 2, FULMEN_DTYPE_F32, &x));
    test_counts(m, x);
    test_refusals();
    test_failures_and_reentry(m, x);
    fulmen_tensor_free(x);
    fulmen_model_free(m);
    return check_finish("test_flop_formulas");
}
