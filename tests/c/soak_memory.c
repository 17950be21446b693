/*
 * Soak: 20,000 training steps (metrics logged every step, a CSV logger,
 * validation and a checkpoint every epoch) must keep the resident memory
 * flat: after a warm-up of 2,000 steps, the largest RSS seen at an epoch
 * end stays within 5% of the RSS at the end of the warm-up; at the end no
 * fulmen handle is alive. Built without sanitizers (their allocators keep
 * freed memory in quarantine), so RSS means what it means in production.
 *
 * Usage: soak_memory [STEPS] (default 20000).
 */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "fixture.h"

#include <string.h>
#include <unistd.h>

#define STEPS_PER_EPOCH 100
#define WARMUP_STEPS 2000

typedef struct {
    fulmen_model *model;
    double rss_after_warmup; /* MiB */
    double rss_max;          /* MiB, after the warm-up */
    double rss_min;
    int64_t samples;
} soak;

static double rss_mib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

static fulmen_error *loss_of(soak *s, const fulmen_batch *batch, fulmen_tensor **out) {
    return fixture_cross_entropy(s->model, batch, out);
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    fulmen_error *e = loss_of(ud, batch, out);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(*out, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "train_loss", v, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH | FULMEN_LOG_PROG_BAR, 0);
    return e;
}

static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    fulmen_error *e = loss_of(ud, batch, &loss);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(loss, &v);
    if (e == NULL) e = fulmen_step_context_log(ctx, "val_loss", v, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    return fixture_add_adam(config, ((soak *)ud)->model, 1e-3);
}

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    soak *s = ud;
    if (hook != FULMEN_HOOK_TRAIN_EPOCH_END) return NULL;
    int64_t step = 0;
    fulmen_error *e = fulmen_hook_context_global_step(ctx, &step);
    if (e != NULL) return e;
    double rss = rss_mib();
    if (step == WARMUP_STEPS) s->rss_after_warmup = s->rss_min = s->rss_max = rss;
    if (step > WARMUP_STEPS) {
        if (rss > s->rss_max) s->rss_max = rss;
        if (rss < s->rss_min) s->rss_min = rss;
        s->samples++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 20000;
    char dir[] = "/tmp/fulmen-soak-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_OK(fulmen_set_num_threads(1));
    soak s;
    memset(&s, 0, sizeof s);
    CHECK_OK(fulmen_manual_seed(5));
    s.model = fixture_mlp(32, 0.1);
    fulmen_dataset *train = fixture_blobs(8 * STEPS_PER_EPOCH, 1, 1.0f), *val = fixture_blobs(64, 2, 1.0f);
    fulmen_loader *tl = fixture_loader(train, 8, true, 3), *vl = fixture_loader(val, 32, false, 0);
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = &s;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s.model, &m));
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_steps", steps));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", -1));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", dir));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", "csv"));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 10));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    double start = rss_mib();
    CHECK_OK(fulmen_trainer_fit(t, m, tl, vl, NULL));
    int64_t done = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &done));
    CHECK(done == steps);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(tl);
    fulmen_loader_free(vl);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    fulmen_model_free(s.model);
    CHECK(fulmen_live_handles() == 0);
    double growth = s.rss_after_warmup > 0 ? (s.rss_max - s.rss_after_warmup) / s.rss_after_warmup : 1;
    printf("soak: %lld steps; RSS %.1f MiB before fit, %.1f MiB after %d warm-up steps, then %.1f..%.1f MiB over %lld "
           "epoch ends (max %+.2f%%); %zu live handles at the end\n",
           (long long)done, start, s.rss_after_warmup, WARMUP_STEPS, s.rss_min, s.rss_max, (long long)s.samples,
           100 * growth, fulmen_live_handles());
    CHECK(steps <= WARMUP_STEPS || (s.samples > 0 && growth <= 0.05));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return check_finish("soak_memory");
}
