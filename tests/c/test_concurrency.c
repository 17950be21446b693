/*
 * Concurrency and churn: two trainers fitting in two threads of one process
 * reach exactly the weights each reaches alone; a trainer (with its
 * options, module and a one-epoch fit every 100th time) created and freed
 * 1,000 times leaves no handle behind. Run under ASan (leaks, races on
 * freed memory) and valgrind.
 */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "fixture.h"

#include <pthread.h>
#include <string.h>

typedef struct {
    fulmen_model *model;
    fulmen_loader *loader;
    int64_t epochs;
    fulmen_error *err; /* fit's result */
} job;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    job *j = ud;
    fulmen_error *e = fixture_cross_entropy(j->model, batch, out);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(*out, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "loss", v, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    return fixture_add_sgd(config, ((job *)ud)->model, 0.1, 0.9);
}

/* Builds a trainer and module for `j`, fits, frees both. */
static void *run_job(void *arg) {
    job *j = arg;
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = j;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *m = NULL;
    fulmen_trainer_options *o = NULL;
    fulmen_trainer *t = NULL;
    j->err = fulmen_lightning_module_new(&vt, j->model, &m);
    if (j->err == NULL) j->err = fulmen_trainer_options_new(&o);
    if (j->err == NULL) j->err = fulmen_trainer_options_set_int(o, "max_epochs", j->epochs);
    if (j->err == NULL) j->err = fulmen_trainer_options_set_bool(o, "enable_progress_bar", false);
    if (j->err == NULL) j->err = fulmen_trainer_options_set_bool(o, "enable_checkpointing", false);
    if (j->err == NULL) j->err = fulmen_trainer_options_set_bool(o, "enable_model_summary", false);
    if (j->err == NULL) j->err = fulmen_trainer_options_set(o, "logger", "false");
    if (j->err == NULL) j->err = fulmen_trainer_new(o, &t);
    if (j->err == NULL) j->err = fulmen_trainer_fit(t, m, j->loader, NULL, NULL);
    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(m);
    return NULL;
}


/* Jobs A and B differ (data, width, seed); each runs alone, then both at
 * once in two threads; the weights must match the lone runs exactly. */
static void two_trainers_in_two_threads(void) {
    fulmen_dataset *da = fixture_blobs(256, 1, 1.0f), *db = fixture_blobs(192, 2, 2.0f);
    job lone[2], par[2];
    for (int k = 0; k < 2; k++) {
        int64_t hidden = k == 0 ? 16 : 24;
        fulmen_dataset *d = k == 0 ? da : db;
        CHECK_OK(fulmen_manual_seed(100 + (uint64_t)k));
        lone[k] = (job){fixture_mlp(hidden, 0), fixture_loader(d, 16, true, 5 + (uint64_t)k), 4, NULL};
        CHECK_OK(fulmen_manual_seed(100 + (uint64_t)k));
        par[k] = (job){fixture_mlp(hidden, 0), fixture_loader(d, 16, true, 5 + (uint64_t)k), 4, NULL};
    }
    run_job(&lone[0]);
    run_job(&lone[1]);
    CHECK_OK(lone[0].err);
    CHECK_OK(lone[1].err);
    pthread_t threads[2];
    for (int k = 0; k < 2; k++) CHECK(pthread_create(&threads[k], NULL, run_job, &par[k]) == 0);
    for (int k = 0; k < 2; k++) CHECK(pthread_join(threads[k], NULL) == 0);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(par[k].err);
        double d = fixture_max_diff(lone[k].model, par[k].model);
        printf("  trainer %c in a thread beside another: max |w - w_alone| = %g\n", 'A' + k, d);
        CHECK(d == 0);
        fulmen_model_free(lone[k].model);
        fulmen_model_free(par[k].model);
        fulmen_loader_free(lone[k].loader);
        fulmen_loader_free(par[k].loader);
    }
    fulmen_dataset_free(da);
    fulmen_dataset_free(db);
}

static void create_and_free_1000_times(void) {
    fulmen_dataset *d = fixture_blobs(32, 3, 1.0f);
    size_t before = fulmen_live_handles();
    for (int i = 0; i < 1000; i++) {
        job j = {fixture_mlp(4, 0), fixture_loader(d, 8, false, 0), i % 100 == 0 ? 1 : 0, NULL};
        if (j.epochs > 0) {
            run_job(&j);
            CHECK_OK(j.err);
        } else {
            /* Options, trainer and module without a fit. */
            fulmen_trainer_options *o = NULL;
            fulmen_trainer *t = NULL;
            CHECK_OK(fulmen_trainer_options_new(&o));
            CHECK_OK(fulmen_trainer_options_set(o, "strategy", i % 2 ? "dp" : "auto"));
            CHECK_OK(fulmen_trainer_new(o, &t));
            fulmen_trainer_options_free(o);
            fulmen_trainer_free(t);
        }
        fulmen_model_free(j.model);
        fulmen_loader_free(j.loader);
        if (fulmen_live_handles() != before) {
            CHECK(fulmen_live_handles() == before);
            break;
        }
    }
    CHECK(fulmen_live_handles() == before);
    fulmen_dataset_free(d);
}

int main(void) {
    CHECK_OK(fulmen_set_num_threads(1));
    two_trainers_in_two_threads();
    create_and_free_1000_times();
    CHECK(fulmen_live_handles() == 0);
    return check_finish("test_concurrency");
}
