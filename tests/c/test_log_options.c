/*
 * Lightning's `self.log` options beyond on_step / on_epoch / prog_bar /
 * sync_dist: reduce_fx (sum, max, min), logger=False, rank_zero_only, and
 * log_dict; what the loggers, the callback metrics and the progress see.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <stdlib.h>

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
    int refused;         /* the bad calls gave the expected codes */
    uint32_t group;      /* the group setup made (sync_dist_group) */
    uint32_t log_group;  /* the group the epoch-end hook logs to */
} state;

static int code_of(fulmen_error *e) {
    int c = e == NULL ? 0 : fulmen_error_code(e);
    fulmen_error_free(e);
    return c;
}

static fulmen_error *step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    state *s = ud;
    int64_t i = 0;
    fulmen_error *e = fulmen_step_context_batch_idx(ctx, &i);
    double v = (double)i; /* 0, 1, 2, 3 */
    if (e == NULL) e = fulmen_step_context_log(ctx, "peak", v, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_MAX, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "low", v + 10, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_MIN, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "count", 1.0, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_SUM | FULMEN_LOG_PROG_BAR, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "hidden", v, FULMEN_LOG_ON_STEP | FULMEN_LOG_NO_LOGGER, 0);
    if (e == NULL)
        e = fulmen_step_context_log(ctx, "mine", v, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_SYNC_DIST | FULMEN_LOG_RANK_ZERO_ONLY, 0);
    const char *names[2] = {"dict_a", "dict_b"};
    double values[2] = {v, -v};
    if (e == NULL) e = fulmen_step_context_log_dict(ctx, names, values, 2, FULMEN_LOG_ON_EPOCH, 0);
    /* Tensors (made in the step: freed with it). */
    fulmen_tensor *scalar = NULL, *pair = NULL, *flag = NULL;
    int64_t two[1] = {2};
    if (e == NULL) e = fulmen_tensor_scalar(v, FULMEN_DTYPE_F32, &scalar);
    if (e == NULL) e = fulmen_step_context_log_tensor(ctx, "tensor_sum", scalar, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_REDUCE_SUM, 0);
    if (e == NULL) e = fulmen_step_context_log_tensor(ctx, "tensor_step", scalar, FULMEN_LOG_ON_STEP, 0);
    if (e == NULL) e = fulmen_tensor_zeros(two, 1, FULMEN_DTYPE_F32, &pair);
    if (e == NULL) e = fulmen_tensor_scalar(1, FULMEN_DTYPE_BOOL, &flag);
    if (e == NULL) {
        s->refused &= code_of(fulmen_step_context_log_tensor(ctx, "t", NULL, 0, 0)) == FULMEN_CODE_NULL_ARGUMENT;
        s->refused &= code_of(fulmen_step_context_log_tensor(ctx, "t", pair, 0, 0)) == FULMEN_CODE_SHAPE_MISMATCH;
        s->refused &= code_of(fulmen_step_context_log_tensor(ctx, "t", flag, 0, 0)) == FULMEN_CODE_DTYPE_MISMATCH;
        s->refused &= code_of(fulmen_step_context_log_tensor(ctx, "bad,name", scalar, 0, 0)) == FULMEN_CODE_INVALID_ARGUMENT;
        s->refused &= code_of(fulmen_step_context_log_tensor(ctx, "tensor_sum", scalar, FULMEN_LOG_ON_EPOCH, 0)) ==
                      FULMEN_CODE_INVALID_ARGUMENT;
    }
    if (e == NULL) {
        const char *bad[2] = {"dict_c", "bad,name"};
        s->refused &= code_of(fulmen_step_context_log(ctx, "x", 1, FULMEN_LOG_REDUCE_SUM | FULMEN_LOG_REDUCE_MAX, 0)) ==
                      FULMEN_CODE_INVALID_ARGUMENT;
        s->refused &= code_of(fulmen_step_context_log(ctx, "x", 1, 1u << 13, 0)) == FULMEN_CODE_INVALID_ARGUMENT;
        s->refused &= code_of(fulmen_step_context_log_dict(ctx, bad, values, 2, 0, 0)) == FULMEN_CODE_INVALID_ARGUMENT;
        s->refused &= code_of(fulmen_step_context_log_dict(ctx, NULL, values, 2, 0, 0)) == FULMEN_CODE_NULL_ARGUMENT;
        s->refused &= code_of(fulmen_step_context_log_dict(ctx, NULL, NULL, 0, 0, 0)) == 0;
        /* the same name with another reduction: Lightning's "different arguments" */
        s->refused &= code_of(fulmen_step_context_log(ctx, "peak", v, FULMEN_LOG_ON_EPOCH, 0)) ==
                      FULMEN_CODE_INVALID_ARGUMENT;
    }
    if (e == NULL) e = fixture_cross_entropy(s->model, batch, out);
    return e;
}

/* The same flags from an epoch-end hook. */
static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    state *s = ud;
    if (hook == FULMEN_HOOK_SETUP) {
        /* torch's new_group in a run of one process: rank 0 only. */
        size_t zero[1] = {0}, one[1] = {1}, twice[2] = {0, 0};
        uint32_t g = 0;
        s->refused &= code_of(fulmen_hook_context_new_group(ctx, one, 1, &g)) == FULMEN_CODE_INVALID_ARGUMENT;
        s->refused &= code_of(fulmen_hook_context_new_group(ctx, twice, 2, &g)) == FULMEN_CODE_INVALID_ARGUMENT;
        s->refused &= code_of(fulmen_hook_context_new_group(ctx, NULL, 0, &g)) == FULMEN_CODE_INVALID_ARGUMENT;
        s->refused &= code_of(fulmen_hook_context_new_group(ctx, NULL, 1, &g)) == FULMEN_CODE_NULL_ARGUMENT;
        s->refused &= code_of(fulmen_hook_context_new_group(ctx, zero, 1, NULL)) == FULMEN_CODE_NULL_ARGUMENT;
        fulmen_error *e = fulmen_hook_context_new_group(ctx, zero, 1, &s->group);
        if (e == NULL) e = fulmen_hook_context_new_group(ctx, zero, 1, &g);
        s->refused &= s->group == 1 && g == 2;
        return e;
    }
    if (hook != FULMEN_HOOK_TRAIN_EPOCH_END) return NULL;
    s->refused &= code_of(fulmen_hook_context_log(ctx, "x", 1, FULMEN_LOG_REDUCE_SUM | FULMEN_LOG_REDUCE_MIN)) ==
                  FULMEN_CODE_INVALID_ARGUMENT;
    fulmen_error *e = fulmen_hook_context_log(ctx, "hook_hidden", 7, FULMEN_LOG_NO_LOGGER);
    if (e == NULL) e = fulmen_hook_context_log(ctx, "hook_sum", 5, FULMEN_LOG_SYNC_DIST | FULMEN_LOG_REDUCE_SUM);
    if (e == NULL) e = fulmen_hook_context_log(ctx, "hook_mine", 6, FULMEN_LOG_RANK_ZERO_ONLY | FULMEN_LOG_PROG_BAR);
    /* sync_dist_group: the group of rank 0 alone reduces nothing */
    uint32_t group = (s->log_group << FULMEN_LOG_GROUP_SHIFT) & FULMEN_LOG_GROUP_MASK;
    if (e == NULL) e = fulmen_hook_context_log(ctx, "group_sum", 9, FULMEN_LOG_SYNC_DIST | FULMEN_LOG_REDUCE_SUM | group);
    return e;
}

static double metric(const fulmen_trainer *t, const char *name) {
    double v = NAN;
    CHECK_OK(fulmen_trainer_callback_metric(t, name, &v));
    return v;
}

int main(void) {
    char root[] = "/tmp/fulmen-log-options-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    state s = {fixture_mlp(4, 0), 1, 0, 1};
    fulmen_dataset *ds = fixture_blobs(64, 3, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    fulmen_lightning_module *m = fixture_module(s.model, &s, step, on_hook);
    fulmen_trainer_options *o = fixture_options(root, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "csv"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    CHECK_OK(fulmen_trainer_fit(t, m, loader, NULL, NULL));
    CHECK(s.refused);

    CHECK(metric(t, "peak") == 3.0);
    CHECK(metric(t, "low_epoch") == 10.0 && metric(t, "low_step") == 13.0);
    CHECK(metric(t, "count") == 4.0);
    CHECK(metric(t, "hidden") == 3.0); /* logger=False still reaches callback_metrics */
    CHECK(metric(t, "mine") == 1.5);
    CHECK(metric(t, "dict_a") == 1.5 && metric(t, "dict_b") == -1.5);
    CHECK(metric(t, "tensor_sum") == 6.0 && metric(t, "tensor_step") == 3.0);
    double unused = 0;
    CHECK_ERR(fulmen_trainer_callback_metric(t, "dict_c", &unused), FULMEN_CODE_INVALID_ARGUMENT, NULL);

    /* The CSV logger got everything but "hidden". */
    char dir[512], path[700], header[512] = {0};
    size_t len = 0;
    CHECK_OK(fulmen_trainer_log_dir(t, dir, sizeof dir, &len));
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f != NULL) {
        CHECK(fgets(header, sizeof header, f) != NULL);
        fclose(f);
    }
    CHECK(strstr(header, "hidden") == NULL && strstr(header, "count") != NULL && strstr(header, "low_step") != NULL);
    CHECK(strstr(header, "hook_sum") != NULL && strstr(header, "hook_mine") != NULL);
    CHECK(metric(t, "hook_hidden") == 7.0 && metric(t, "hook_sum") == 5.0 && metric(t, "hook_mine") == 6.0);
    CHECK(metric(t, "group_sum") == 9.0);

    /* A group id the run did not make fails the run where it is reduced. */
    s.log_group = 9;
    fulmen_trainer *bad = NULL;
    CHECK_OK(fulmen_trainer_new(o, &bad));
    CHECK_ERR(fulmen_trainer_fit(bad, m, loader, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT, "sync_dist_group 9");
    fulmen_trainer_free(bad);

    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_model_free(s.model);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_log_options");
}
