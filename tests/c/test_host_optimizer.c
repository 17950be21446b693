/*
 * An optimizer written by the host (fulmen_optimizer_host_new): plain SGD
 * in C equals fulmen's SGD bit for bit over a fit; a scheduler changes the
 * lr its step reads; its bytes go into checkpoints (fulmen's and
 * Lightning's format) and come back on resume; state files of optimizers
 * and schedulers without a trainer; and the errors: a NULL or short
 * vtable, a failing step or zero_grad, hostile state sizes.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "check.h"
#include "fixture.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[] = "/tmp/fulmen-host-optimizer-XXXXXX";

/* What the host optimizer does and saw. */
typedef struct {
    int steps;         /* step calls */
    int fail_at;       /* the step call that fails (0: none) */
    int zero_grads;    /* zero_grad calls */
    int fail_zero_grad;
    int frees;         /* userdata_free calls */
    double lrs[64];    /* group 0's lr at each step */
    int n_lrs;
    size_t bad_len;    /* non-zero: state_dict writes this *len */
    int null_data;     /* state_dict writes *data NULL */
    uint8_t saved[8];  /* the state: the step count, little-endian */
    int loads;         /* load_state_dict calls */
    uint64_t loaded;   /* the step count they read */
    fulmen_tensor *params[16]; /* kept from the first step, for zero_grad */
    size_t n_params;
} host_sgd;

/* Frees the parameter handles the host kept. */
static void release_params(host_sgd *h) {
    for (size_t i = 0; i < h->n_params; i++) fulmen_tensor_free(h->params[i]);
    h->n_params = 0;
}

/* p -= lr * grad for every parameter that has a gradient, as torch's SGD
 * without momentum. */
static fulmen_error *sgd_step(void *ud, const fulmen_optimizer_step_context *ctx) {
    host_sgd *h = ud;
    h->steps++;
    if (h->steps == h->fail_at) return fulmen_error_new(FULMEN_CODE_INVALID_STATE, "host step gave up");
    bool keep = h->n_params == 0;
    size_t groups = 0;
    fulmen_error *e = fulmen_optimizer_step_context_group_count(ctx, &groups);
    for (size_t g = 0; e == NULL && g < groups; g++) {
        double lr = -1;
        size_t n = 0;
        e = fulmen_optimizer_step_context_get(ctx, g, "lr", &lr);
        if (e == NULL) e = fulmen_optimizer_step_context_param_count(ctx, g, &n);
        if (e == NULL && g == 0 && h->n_lrs < 64) h->lrs[h->n_lrs++] = lr;
        for (size_t i = 0; e == NULL && i < n; i++) {
            fulmen_tensor *p = NULL, *grad = NULL;
            e = fulmen_optimizer_step_context_param(ctx, g, i, &p);
            if (e == NULL) e = fulmen_tensor_grad(p, &grad);
            if (e == NULL && grad != NULL) e = fulmen_tensor_add_(p, grad, -lr);
            /* grad (and p, unless kept) are released when the step returns. */
            if (e == NULL && keep && h->n_params < 16) {
                e = fulmen_tensor_keep(p);
                if (e == NULL) h->params[h->n_params++] = p;
            }
        }
    }
    return e;
}

static fulmen_error *sgd_zero_grad(void *ud, bool set_to_none) {
    host_sgd *h = ud;
    h->zero_grads++;
    if (!set_to_none) return fulmen_error_new(FULMEN_CODE_INVALID_ARGUMENT, "set_to_none expected");
    if (h->fail_zero_grad) return fulmen_error_new(FULMEN_CODE_IO, "zero_grad gave up");
    /* Zeroes the gradients (the C API cannot set them to none): the next
     * backward then writes 0 + g, the same values as a fresh gradient. */
    fulmen_error *e = NULL;
    for (size_t i = 0; e == NULL && i < h->n_params; i++) {
        fulmen_tensor *grad = NULL;
        e = fulmen_tensor_grad(h->params[i], &grad);
        if (e == NULL && grad != NULL) e = fulmen_tensor_zero_(grad);
    }
    return e;
}

static fulmen_error *sgd_state_dict(void *ud, const uint8_t **data, size_t *len) {
    host_sgd *h = ud;
    uint64_t steps = (uint64_t)h->steps;
    for (int i = 0; i < 8; i++) h->saved[i] = (uint8_t)(steps >> (8 * i));
    *data = h->null_data ? NULL : h->saved;
    *len = h->bad_len != 0 ? h->bad_len : sizeof h->saved;
    return NULL;
}

static fulmen_error *sgd_load_state_dict(void *ud, const uint8_t *data, size_t len) {
    host_sgd *h = ud;
    h->loads++;
    if (len != 8) return fulmen_error_new(FULMEN_CODE_FORMAT, "8 bytes expected");
    h->loaded = 0;
    for (int i = 0; i < 8; i++) h->loaded |= (uint64_t)data[i] << (8 * i);
    return NULL;
}

static void count_free(void *ud) { ((host_sgd *)ud)->frees++; }

/* The vtable of host_sgd `h`: every slot, or step alone when `minimal`. */
static fulmen_optimizer_vtable vtable_of(host_sgd *h, bool minimal) {
    fulmen_optimizer_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = h;
    vt.userdata_free = count_free;
    vt.step = sgd_step;
    if (!minimal) {
        vt.zero_grad = sgd_zero_grad;
        vt.state_dict = sgd_state_dict;
        vt.load_state_dict = sgd_load_state_dict;
    }
    return vt;
}

/* ------------------------------------------------------------ trainer */

typedef struct {
    fulmen_model *model; /* first: the fixtures read it */
    host_sgd *host;      /* NULL: fulmen's SGD */
    bool minimal;        /* the host vtable has step only */
    bool step_lr;        /* StepLR(1, 0.5) per epoch */
} fit_data;

static fulmen_error *train_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *b, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((fit_data *)ud)->model, b, out);
}

static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    fit_data *f = ud;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e = NULL;
    if (f->host == NULL) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.1;
        e = fulmen_optimizer_sgd_new(f->model, NULL, 0, &o, &opt);
    } else {
        fulmen_optimizer_vtable vt = vtable_of(f->host, f->minimal);
        e = fulmen_optimizer_host_new(&vt, f->model, NULL, 0, 0.1, &opt);
    }
    if (e != NULL) return e;
    fulmen_scheduler *s = NULL;
    if (f->step_lr) e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &s);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, s, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) {
        fulmen_scheduler_free(s);
        fulmen_optimizer_free(opt);
    }
    return e;
}

/* Fits 4 batches of 16 per epoch for `epochs` from `ckpt` (NULL: none);
 * saves a full checkpoint at `save` after the fit (NULL: none), in
 * `format` (NULL: fulmen's). Returns the fit's error (or the save's). */
static fulmen_error *fit(fit_data *f, int64_t epochs, const char *ckpt, const char *save, const char *format) {
    fulmen_dataset *ds = fixture_blobs(64, 3, 2.0f);
    fulmen_loader *loader = fixture_loader(ds, 16, false, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = f;
    vt.training_step = train_step;
    vt.configure_optimizers = configure;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, f->model, &m));
    fulmen_trainer_options *o = fixture_options(NULL, epochs);
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    if (format != NULL) CHECK_OK(fulmen_trainer_options_set(o, "checkpoint_format", format));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_error *e = fulmen_trainer_fit(t, m, loader, NULL, ckpt);
    if (e == NULL && save != NULL) e = fulmen_trainer_save_checkpoint(t, m, save, false);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return e;
}

static fulmen_model *seeded_mlp(void) {
    CHECK_OK(fulmen_manual_seed(11));
    return fixture_mlp(8, 0);
}

/* Host SGD (with or without its own zero_grad) and fulmen's SGD give the
 * same weights, bit for bit, after 2 epochs. */
static void test_equals_builtin_sgd(void) {
    for (int minimal = 0; minimal < 2; minimal++) {
        host_sgd h = {0};
        fit_data own = {seeded_mlp(), &h, minimal == 1, false};
        fit_data builtin = {seeded_mlp(), NULL, false, false};
        CHECK(fixture_max_diff(own.model, builtin.model) == 0);
        CHECK_OK(fit(&own, 2, NULL, NULL, NULL));
        CHECK_OK(fit(&builtin, 2, NULL, NULL, NULL));
        CHECK(h.steps == 8);
        CHECK(minimal ? h.zero_grads == 0 : h.zero_grads >= 8);
        CHECK(fixture_max_diff(own.model, builtin.model) == 0);
        CHECK(h.frees == 1); /* the trainer freed the optimizer */
        release_params(&h);
        fulmen_model_free(own.model);
        fulmen_model_free(builtin.model);
    }
}

/* StepLR halves the lr the host's step reads each epoch. */
static void test_scheduler_sets_the_lr(void) {
    host_sgd h = {0};
    fit_data f = {seeded_mlp(), &h, false, true};
    CHECK_OK(fit(&f, 3, NULL, NULL, NULL));
    CHECK(h.n_lrs == 12);
    for (int i = 0; i < h.n_lrs; i++) CHECK(h.lrs[i] == (i < 4 ? 0.1 : i < 8 ? 0.05 : 0.025));
    release_params(&h);
    fulmen_model_free(f.model);
}

/* A checkpoint holds the host's bytes with the param groups; resuming
 * gives them back and the scheduler's lr, in both formats. */
static void test_checkpoint_and_resume(void) {
    const char *formats[2] = {"safetensors", "lightning"};
    for (int i = 0; i < 2; i++) {
        char path[96];
        snprintf(path, sizeof path, "%s/resume-%d.ckpt", root, i);
        host_sgd h = {0};
        fit_data f = {seeded_mlp(), &h, false, true};
        CHECK_OK(fit(&f, 1, NULL, path, formats[i]));
        CHECK(h.steps == 4);
        host_sgd back = {0};
        back.steps = 100; /* its own count goes on from there */
        fit_data g = {f.model, &back, false, true};
        CHECK_OK(fit(&g, 2, path, NULL, formats[i]));
        CHECK(back.loads == 1 && back.loaded == 4);
        CHECK(back.n_lrs == 4 && back.lrs[0] == 0.05 && back.lrs[3] == 0.05);
        /* An optimizer without load_state_dict cannot take the bytes. */
        host_sgd bare = {0};
        fit_data b = {f.model, &bare, true, true};
        CHECK_ERR(fit(&b, 2, path, NULL, formats[i]), FULMEN_CODE_FORMAT, "load_state_dict");
        remove(path);
        release_params(&h);
        release_params(&back);
        release_params(&bare);
        fulmen_model_free(f.model);
    }
}

/* A failing step ends the fit with its code and message. */
static void test_failing_step_ends_the_fit(void) {
    host_sgd h = {0};
    h.fail_at = 3;
    fit_data f = {seeded_mlp(), &h, false, false};
    CHECK_ERR(fit(&f, 2, NULL, NULL, NULL), FULMEN_CODE_INVALID_STATE, "host step gave up");
    CHECK(h.steps == 3 && h.frees == 1);
    /* A failing zero_grad ends it at the next step. */
    host_sgd z = {0};
    z.fail_zero_grad = 1;
    fit_data g = {f.model, &z, false, false};
    CHECK_ERR(fit(&g, 2, NULL, NULL, NULL), FULMEN_CODE_IO, "zero_grad gave up");
    CHECK(z.steps <= 1);
    release_params(&h);
    release_params(&z);
    fulmen_model_free(f.model);
}

/* A state larger than FULMEN_MAX_OPTIMIZER_STATE, or bytes at NULL, are
 * refused when a checkpoint is saved, before anything is copied. */
static void test_hostile_state_sizes(void) {
    char path[96];
    snprintf(path, sizeof path, "%s/hostile.ckpt", root);
    host_sgd h = {0};
    h.bad_len = SIZE_MAX;
    fit_data f = {seeded_mlp(), &h, false, false};
    CHECK_ERR(fit(&f, 1, NULL, path, NULL), FULMEN_CODE_OUT_OF_RANGE, "at most");
    h.bad_len = (size_t)FULMEN_MAX_OPTIMIZER_STATE + 1;
    CHECK_ERR(fit(&f, 1, NULL, path, NULL), FULMEN_CODE_OUT_OF_RANGE, "at most");
    h.bad_len = 0;
    h.null_data = 1;
    CHECK_ERR(fit(&f, 1, NULL, path, NULL), FULMEN_CODE_CALLBACK, "NULL");
    CHECK(access(path, F_OK) != 0);
    release_params(&h);
    fulmen_model_free(f.model);
}

/* ---------------------------------------------------------- host loop */

/* Creation errors; userdata_free runs once when the optimizer goes and
 * never when creation fails. */
static void test_creation_errors(void) {
    host_sgd h = {0};
    fulmen_model *model = seeded_mlp();
    fulmen_optimizer *opt = NULL;
    fulmen_optimizer_vtable vt = vtable_of(&h, false);
    CHECK_ERR(fulmen_optimizer_host_new(NULL, model, NULL, 0, 0.1, &opt), FULMEN_CODE_NULL_ARGUMENT, "vtable");
    vt.struct_size = sizeof(size_t);
    CHECK_ERR(fulmen_optimizer_host_new(&vt, model, NULL, 0, 0.1, &opt), FULMEN_CODE_INVALID_ARGUMENT, "struct_size");
    vt = vtable_of(&h, false);
    vt.step = NULL;
    CHECK_ERR(fulmen_optimizer_host_new(&vt, model, NULL, 0, 0.1, &opt), FULMEN_CODE_INVALID_ARGUMENT, "step");
    vt = vtable_of(&h, false);
    CHECK_ERR(fulmen_optimizer_host_new(&vt, model, NULL, 0, -0.1, &opt), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_host_new(&vt, model, NULL, 0, NAN, &opt), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_optimizer_host_new(&vt, NULL, NULL, 0, 0.1, &opt), FULMEN_CODE_INVALID_ARGUMENT, "no parameters");
    CHECK_ERR(fulmen_optimizer_host_new(&vt, model, NULL, 0, 0.1, NULL), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(opt == NULL && h.frees == 0);
    CHECK_OK(fulmen_optimizer_host_new(&vt, model, NULL, 0, 0.1, &opt));
    double lr = 0;
    CHECK_OK(fulmen_optimizer_get_lr(opt, &lr));
    CHECK(lr == 0.1);
    CHECK_OK(fulmen_optimizer_param_group_set(opt, 0, "momentum", 0.9));
    CHECK_ERR(fulmen_optimizer_param_group_set(opt, 0, "eps", 1e-8), FULMEN_CODE_INVALID_ARGUMENT, "eps");
    fulmen_optimizer_free(opt);
    CHECK(h.frees == 1);
    fulmen_model_free(model);
}

/* fulmen_optimizer_step / zero_grad in a host loop, and the state files of
 * an optimizer and a scheduler without a trainer. */
static void test_host_loop_and_state_files(void) {
    host_sgd h = {0};
    fulmen_model *model = seeded_mlp();
    fulmen_optimizer *opt = NULL;
    fulmen_optimizer_vtable vt = vtable_of(&h, false);
    CHECK_OK(fulmen_optimizer_host_new(&vt, model, NULL, 0, 0.5, &opt));
    fulmen_scheduler *s = NULL;
    CHECK_OK(fulmen_scheduler_step_lr_new(opt, 1, 0.5, &s));
    CHECK_OK(fulmen_optimizer_step(opt)); /* no gradients yet: nothing moves */
    CHECK_OK(fulmen_scheduler_step(s, opt, NAN));
    CHECK_OK(fulmen_optimizer_zero_grad(opt));
    CHECK(h.steps == 1 && h.zero_grads == 1);
    h.fail_zero_grad = 1;
    CHECK_ERR(fulmen_optimizer_zero_grad(opt), FULMEN_CODE_IO, "zero_grad gave up");
    h.fail_zero_grad = 0;
    CHECK_OK(fulmen_optimizer_step(opt)); /* the error was reported once */

    char opt_path[96], sched_path[96];
    snprintf(opt_path, sizeof opt_path, "%s/optimizer.safetensors", root);
    snprintf(sched_path, sizeof sched_path, "%s/scheduler.safetensors", root);
    CHECK_OK(fulmen_optimizer_save_state(opt, opt_path));
    CHECK_OK(fulmen_scheduler_save_state(s, sched_path));

    host_sgd h2 = {0};
    fulmen_optimizer_vtable vt2 = vtable_of(&h2, false);
    fulmen_optimizer *opt2 = NULL;
    fulmen_scheduler *s2 = NULL;
    CHECK_OK(fulmen_optimizer_host_new(&vt2, model, NULL, 0, 0.9, &opt2));
    CHECK_OK(fulmen_scheduler_step_lr_new(opt2, 1, 0.5, &s2));
    CHECK_OK(fulmen_optimizer_load_state(opt2, opt_path));
    CHECK(h2.loads == 1 && h2.loaded == 2);
    double lr = 0;
    CHECK_OK(fulmen_optimizer_get_lr(opt2, &lr));
    CHECK(lr == 0.25);
    CHECK_OK(fulmen_scheduler_load_state(s2, sched_path));
    CHECK_OK(fulmen_scheduler_step(s2, opt2, NAN)); /* step 2 of StepLR: 0.5 * 0.25 */
    CHECK_OK(fulmen_optimizer_get_lr(opt2, &lr));
    CHECK(lr == 0.125);
    /* The wrong file for each, a missing one, and a refused state, which
     * changes nothing. */
    CHECK_ERR(fulmen_optimizer_load_state(opt2, sched_path), FULMEN_CODE_FORMAT, "optimizer");
    CHECK_ERR(fulmen_scheduler_load_state(s2, opt_path), FULMEN_CODE_FORMAT, "scheduler");
    CHECK_ERR(fulmen_optimizer_load_state(opt2, root), FULMEN_CODE_IO, NULL);
    h.bad_len = 3;
    CHECK_OK(fulmen_optimizer_save_state(opt, opt_path));
    CHECK_ERR(fulmen_optimizer_load_state(opt2, opt_path), FULMEN_CODE_FORMAT, "8 bytes expected");
    CHECK_OK(fulmen_optimizer_get_lr(opt2, &lr));
    CHECK(lr == 0.125);
    h.bad_len = SIZE_MAX;
    CHECK_ERR(fulmen_optimizer_save_state(opt, opt_path), FULMEN_CODE_OUT_OF_RANGE, "at most");
    fulmen_sgd_options so = fulmen_sgd_options_default();
    fulmen_optimizer *sgd = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(model, NULL, 0, &so, &sgd));
    h.bad_len = 0;
    CHECK_OK(fulmen_optimizer_save_state(opt, opt_path));
    CHECK_ERR(fulmen_optimizer_load_state(sgd, opt_path), FULMEN_CODE_FORMAT, "host");
    fulmen_optimizer_free(sgd);
    remove(opt_path);
    remove(sched_path);
    fulmen_scheduler_free(s2);
    fulmen_optimizer_free(opt2);
    fulmen_scheduler_free(s);
    fulmen_optimizer_free(opt);
    CHECK(h.frees == 1 && h2.frees == 1);
    release_params(&h);
    release_params(&h2);
    fulmen_model_free(model);
}

int main(void) {
    CHECK(mkdtemp(root) != NULL);
    test_creation_errors();
    test_host_loop_and_state_files();
    test_equals_builtin_sgd();
    test_scheduler_sets_the_lr();
    test_checkpoint_and_resume();
    test_failing_step_ends_the_fit();
    test_hostile_state_sizes();
    rmdir(root);
    return check_finish("test_host_optimizer");
}
