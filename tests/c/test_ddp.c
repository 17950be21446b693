/*
 * DDP across real processes on loopback (c10d's gloo backend).
 *
 * Without arguments this program is the orchestrator: it runs each scenario
 * as a child process of itself (`test_ddp SCENARIO DIR`) and checks what the
 * scenarios leave behind. Scenarios:
 *   reference B     one process, global batch B: the weights DDP must reach
 *   launcher        strategy "ddp", devices=2: fulmen re-executes this
 *                   program for rank 1 (its own launcher)
 *   external        3 ranks started by the orchestrator with torchrun's
 *                   environment variables (RANK, LOCAL_RANK, WORLD_SIZE, ...)
 *   killed          launcher with 2 ranks; rank 1 dies by SIGKILL at step 3:
 *                   rank 0's fit fails with FULMEN_CODE_DISTRIBUTED in time
 *   mismatch        2 external ranks whose models differ: both fail clearly
 *   nan_rank        2 external ranks; rank 1's loss is NaN at step 2: its fit
 *                   fails with that, and rank 0's names rank 1 and the reason
 *   prepare_fails   2 external ranks, a datamodule whose prepare_data fails on
 *                   local rank 0: both fits end at once with clear errors
 *   prepare_nodes   2 external ranks on 2 nodes: the datamodule's and the
 *                   module's prepare_data on each node's local rank 0, then
 *                   with prepare_data_per_node false on global rank 0 only;
 *                   then the module's prepare_data fails on rank 0: both
 *                   fits end at once, rank 1 saying rank 0 failed and why
 *   timer           max_time with 2 ranks whose clocks disagree: same last step
 *   host_abort      2 external ranks of a host loop; rank 1 calls
 *                   fulmen_distributed_abort: rank 0's all-reduce fails
 *                   at once with rank 1's reason
 *   hostloop        2 external ranks, a host-owned loop with fulmen_ddp,
 *                   a sharded loader and the collectives
 *   fsdp_hostloop   2 external ranks, a host-owned loop with fulmen_fsdp
 *                   (every Linear a unit), gathered and saved midway
 *   early_exit N    launcher with 2 ranks; rank 1 exits with status N before
 *                   joining: rank 0's fit fails at once naming it
 *   orphan          a launched rank whose launcher is gone gives up at once
 *   envrank         2 ranks with torch's env:// variables only (RANK,
 *                   WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no LOCAL_RANK)
 *   slurm           SLURM says 2 tasks per node, devices=1: an error
 *   manual          launcher with 2 ranks, manual optimization (the step's
 *                   own zero_grad, manual_backward and optimizer step)
 *   fsdp            launcher with 2 ranks, strategy "fsdp" (every Linear a
 *                   sharding unit): the weights of the 16-sample reference
 *   fsdp_manual     the same under manual optimization
 *   unsharded       launcher with 2 ranks, use_distributed_sampler false:
 *                   each rank reads the whole loader (so the weights are
 *                   those of one process with the per-rank batch)
 * DDP ranks see batch 8 of a sharded loader; with a mean loss their averaged
 * gradients equal those of one process with batch 8 x world, so the final
 * weights must match the reference to float tolerance.
 */
#define _XOPEN_SOURCE 700 /* fork, kill, putenv, mkdtemp, nanosleep */

#include "check.h"
#include "fixture.h"
#include "ranks.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


#define SAMPLES 240
#define RANK_BATCH 8
#define EPOCHS 3
#define HIDDEN 8

static const char *self_path;
static int count_entries(const char *path);

/* ---------------------------------------------------------------- helpers */

/* Element `i` of a 1-D tensor. */
static double element(const fulmen_tensor *t, int64_t i) {
    fulmen_tensor *one = NULL;
    CHECK_OK(fulmen_tensor_narrow(t, 0, i, 1, &one));
    double v = check_item(one);
    fulmen_tensor_free(one);
    return v;
}

static size_t my_rank(void) {
    size_t rank = 0;
    CHECK_OK(fulmen_distributed_ranks(&rank, NULL, NULL));
    return rank;
}

static bool manual_mode = false; /* automatic_optimization off */

typedef struct {
    fulmen_model *model;
    int64_t die_at_step; /* raise SIGKILL at this global step on rank 1 (-1: never) */
    bool slow_rank1;     /* rank 1 sleeps 3 ms per step (its clock runs ahead) */
} module_state;

/* The group of ranks 0 and 1 the module's setup makes (rank 0 alone in a
 * world of one): sync_dist_group. */
static bool log_trend; /* the training step logs rank_trend */
static int64_t nan_at_step = -1; /* rank 1's loss is NaN at this global step (-1: never) */
static uint32_t pair_group;

static uint32_t in_pair(void) { return (pair_group << FULMEN_LOG_GROUP_SHIFT) & FULMEN_LOG_GROUP_MASK; }

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    module_state *s = ud;
    int64_t step = 0;
    size_t rank = 0, world = 1;
    fulmen_error *e = fulmen_step_context_global_step(ctx, &step);
    if (e == NULL) e = fulmen_distributed_ranks(&rank, NULL, &world);
    if (e != NULL) return e;
    if (s->die_at_step >= 0 && rank == 1 && step == s->die_at_step) raise(SIGKILL);
    if (s->slow_rank1 && rank == 1) {
        struct timespec ts = {0, 3 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    e = fixture_cross_entropy(s->model, batch, out);
    if (e == NULL && rank == 1 && step == nan_at_step) {
        fulmen_tensor *nan_loss = NULL;
        e = fulmen_tensor_mul_scalar(*out, NAN, &nan_loss);
        fulmen_tensor_free(*out);
        *out = nan_loss;
    }
    if (e == NULL && manual_mode) { /* the same update, by hand; no loss returned */
        e = fulmen_step_context_optimizer_zero_grad(ctx, 0);
        if (e == NULL) e = fulmen_step_context_manual_backward(ctx, *out);
        if (e == NULL) e = fulmen_step_context_optimizer_step(ctx, 0, NULL);
        *out = NULL;
    }
    /* rank_synced averages to (world - 1) / 2 on every rank; rank_local stays. */
    if (e == NULL) e = fulmen_step_context_log(ctx, "rank_synced", (double)rank, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_SYNC_DIST, 0);
    if (e == NULL) e = fulmen_step_context_log(ctx, "rank_local", (double)rank, FULMEN_LOG_ON_EPOCH, 0);
    /* reduce_fx with sync_dist: the epoch's max over ranks, the step's sum */
    if (e == NULL)
        e = fulmen_step_context_log(ctx, "rank_max", (double)rank, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_SYNC_DIST | FULMEN_LOG_REDUCE_MAX, 0);
    if (e == NULL)
        e = fulmen_step_context_log(ctx, "rank_sum", (double)rank, FULMEN_LOG_ON_STEP | FULMEN_LOG_SYNC_DIST | FULMEN_LOG_REDUCE_SUM, 0);
    /* The same over ranks 0 and 1 only: a third rank keeps its own. */
    if (e == NULL)
        e = fulmen_step_context_log(ctx, "pair_mean", (double)rank, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_SYNC_DIST | in_pair(), 0);
    if (e == NULL)
        e = fulmen_step_context_log(ctx, "pair_sum", (double)rank,
                                    FULMEN_LOG_ON_STEP | FULMEN_LOG_SYNC_DIST | FULMEN_LOG_REDUCE_SUM | in_pair(), 0);
    /* Without sync_dist: falls epoch by epoch on rank 0, rises on the others. */
    if (e == NULL && log_trend)
        e = fulmen_step_context_log(ctx, "rank_trend", rank == 0 ? -(double)step : (double)step, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

/* Epoch-end hook logs with sync_dist: the max and the sum of the ranks,
 * and the mean (the default). */
static int module_prepare_calls;  /* the module's prepare_data, when overridden */
static bool module_prepare_fails; /* ... and whether it fails */

static fulmen_error *on_hook(void *ud, int32_t hook, fulmen_hook_context *ctx) {
    (void)ud;
    if (hook == FULMEN_HOOK_PREPARE_DATA) {
        module_prepare_calls++;
        if (module_prepare_fails) return fulmen_error_new(FULMEN_CODE_IO, "the module's data is gone");
    }
    if (hook == FULMEN_HOOK_SETUP) {
        size_t world = 1, pair[2] = {0, 1};
        fulmen_error *e = fulmen_distributed_ranks(NULL, NULL, &world);
        if (e == NULL) e = fulmen_hook_context_new_group(ctx, pair, world > 1 ? 2 : 1, &pair_group);
        return e;
    }
    if (hook != FULMEN_HOOK_TRAIN_EPOCH_END) return NULL;
    double rank = (double)my_rank();
    fulmen_error *e = fulmen_hook_context_log(ctx, "hook_max", rank, FULMEN_LOG_SYNC_DIST | FULMEN_LOG_REDUCE_MAX);
    if (e == NULL) e = fulmen_hook_context_log(ctx, "hook_sum", rank + 1, FULMEN_LOG_SYNC_DIST | FULMEN_LOG_REDUCE_SUM);
    if (e == NULL) e = fulmen_hook_context_log(ctx, "hook_mean", rank, FULMEN_LOG_SYNC_DIST);
    if (e == NULL) e = fulmen_hook_context_log(ctx, "hook_mine", rank, FULMEN_LOG_SYNC_DIST | FULMEN_LOG_RANK_ZERO_ONLY);
    if (e == NULL)
        e = fulmen_hook_context_log(ctx, "hook_pair_max", rank * 10 + 1, FULMEN_LOG_SYNC_DIST | FULMEN_LOG_REDUCE_MAX | in_pair());
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    return fixture_add_sgd(config, ((module_state *)ud)->model, 0.2, 0.9);
}

static fulmen_lightning_module *module_for(module_state *s) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = s;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = on_hook;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, s->model, &m));
    return m;
}

/* The same initial weights in every process. */
static fulmen_model *seeded_mlp(int64_t hidden) {
    CHECK_OK(fulmen_manual_seed(11));
    return fixture_mlp(hidden, 0);
}

static fulmen_trainer_options *options(const char *root, const char *strategy, const char *devices, bool files) {
    fulmen_trainer_options *o = NULL;
    CHECK_OK(fulmen_trainer_options_new(&o));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", EPOCHS));
    CHECK_OK(fulmen_trainer_options_set(o, "default_root_dir", root));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_checkpointing", files));
    CHECK_OK(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    CHECK_OK(fulmen_trainer_options_set(o, "logger", files ? "csv" : "false"));
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "cpu"));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", devices));
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_sanity_val_steps", 0));
    CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", 1));
    fulmen_strategy *s = NULL;
    CHECK_OK(fulmen_strategy_new(strategy, &s));
    CHECK_OK(fulmen_strategy_set(s, "timeout", "30"));
    CHECK_OK(fulmen_trainer_options_set_strategy(o, s));
    fulmen_strategy_free(s);
    return o;
}

static const char *max_time = NULL; /* the trainer's max_time, when set */
static const fulmen_model_checkpoint_options *checkpoint_opts = NULL; /* a ModelCheckpoint, when set */
static bool unsharded = false;      /* use_distributed_sampler false */

/* Trains the MLP with `strategy` and per-process batch `batch`; saves the
 * final weights to `weights`. Returns fit's error (NULL on success). */
static fulmen_error *train(const char *root, const char *strategy, const char *devices, size_t batch, int64_t hidden,
                           int64_t die_at_step, bool files, const char *weights, fulmen_trainer **trainer_out) {
    fulmen_dataset *ds = fixture_blobs(SAMPLES, 5, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, batch, false, 0);
    module_state s = {seeded_mlp(hidden), die_at_step, max_time != NULL};
    fulmen_lightning_module *m = module_for(&s);
    CHECK_OK(fulmen_lightning_module_set_automatic_optimization(m, !manual_mode));
    fulmen_trainer_options *o = options(root, strategy, devices, files);
    if (max_time != NULL) {
        CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", 1000));
        CHECK_OK(fulmen_trainer_options_set(o, "max_time", max_time));
    }
    if (unsharded) CHECK_OK(fulmen_trainer_options_set_bool(o, "use_distributed_sampler", false));
    if (strcmp(strategy, "fsdp") == 0) CHECK_OK(fulmen_trainer_options_set(o, "fsdp_auto_wrap_policy", "Linear"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    if (checkpoint_opts != NULL) CHECK_OK(fulmen_trainer_add_model_checkpoint(t, checkpoint_opts));
    fulmen_error *err = fulmen_trainer_fit(t, m, loader, NULL, NULL);
    if (err == NULL && weights != NULL) CHECK_OK(fulmen_model_save(s.model, weights));
    if (trainer_out != NULL) *trainer_out = t;
    else fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return err;
}

static double metric(const fulmen_trainer *t, const char *name) {
    double v = NAN;
    CHECK_OK(fulmen_trainer_callback_metric(t, name, &v));
    return v;
}

/* ------------------------------------------------------------- scenarios */

static int scenario_reference(const char *dir, size_t batch) {
    char weights[512];
    snprintf(weights, sizeof weights, "%s/reference-%zu.safetensors", dir, batch);
    CHECK_OK(train(dir, "single_device", "1", batch, HIDDEN, -1, false, weights, NULL));
    return check_finish("reference");
}

/* strategy="ddp" with devices=1 and no MASTER_PORT: a world of one that
 * picks its own port, as Lightning's environment does, and trains as one
 * process does. */
static int scenario_single(const char *dir) {
    char root[512], weights[512];
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    snprintf(root, sizeof root, "%s/single", dir);
    snprintf(weights, sizeof weights, "%s/single.safetensors", dir);
    CHECK_OK(train(root, "ddp", "1", 16, HIDDEN, -1, false, weights, NULL));
    size_t world = 0;
    CHECK_OK(fulmen_distributed_ranks(NULL, NULL, &world));
    CHECK(world == 1);
    CHECK_OK(fulmen_distributed_shutdown(60));
    return check_finish("single");
}

static int scenario_launcher(const char *dir) {
    char root[512], weights[512], logdir[512];
    snprintf(root, sizeof root, "%s/launcher", dir);
    /* rank unknown until fit joins: name the file after it. */
    fulmen_trainer *t = NULL;
    snprintf(weights, sizeof weights, "%s/launcher-tmp-%d.safetensors", dir, (int)getpid());
    CHECK_OK(train(root, "ddp", "2", RANK_BATCH, HIDDEN, -1, true, weights, &t));
    size_t rank = 0, world = 0, local = 0;
    CHECK_OK(fulmen_distributed_ranks(&rank, &local, &world));
    CHECK(world == 2 && rank == local);
    char final[512];
    snprintf(final, sizeof final, "%s/launcher-rank%zu.safetensors", dir, rank);
    CHECK(rename(weights, final) == 0);
    /* sync_dist averages over ranks; the local metric keeps each rank's own. */
    CHECK(fabs(metric(t, "rank_synced") - 0.5) < 1e-12);
    CHECK(fabs(metric(t, "rank_local") - (double)rank) < 1e-12);
    CHECK(metric(t, "rank_max") == 1.0 && metric(t, "rank_sum") == 1.0);
    CHECK(metric(t, "hook_max") == 1.0 && metric(t, "hook_sum") == 3.0 && metric(t, "hook_mean") == 0.5);
    CHECK(metric(t, "hook_mine") == (double)my_rank());
    /* The group of both ranks: as the job's. */
    CHECK(metric(t, "pair_mean") == 0.5 && metric(t, "pair_sum") == 1.0 && metric(t, "hook_pair_max") == 11.0);
    int64_t step = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == EPOCHS * (SAMPLES / 2 / RANK_BATCH));
    /* Only rank 0 writes logs and checkpoints. */
    size_t n = 0;
    fulmen_error *e = fulmen_trainer_log_dir(t, logdir, sizeof logdir, &n);
    if (rank == 0) {
        CHECK(e == NULL);
        if (e != NULL) fulmen_error_free(e);
    } else {
        CHECK_ERR(e, FULMEN_CODE_INVALID_STATE, NULL);
    }
    fulmen_trainer_free(t);
    /* Rank 0 waits for the rank it started; that rank has nothing to wait for. */
    CHECK_OK(fulmen_distributed_shutdown(60));
    bool joined = true;
    CHECK_OK(fulmen_distributed_is_joined(&joined));
    CHECK(!joined);
    return check_finish(rank == 0 ? "launcher rank 0" : "launcher rank 1");
}

/* Two launched ranks of scenario `name` train; each saves its weights as
 * <name>-rank<N>.safetensors and must have taken `steps` optimizer steps. */
static int two_launched_ranks(const char *dir, const char *name, const char *strategy, int64_t steps) {
    char root[512], weights[512], final[512], what[64];
    snprintf(root, sizeof root, "%s/%s", dir, name);
    snprintf(weights, sizeof weights, "%s/%s-tmp-%d.safetensors", dir, name, (int)getpid());
    fulmen_trainer *t = NULL;
    CHECK_OK(train(root, strategy, "2", RANK_BATCH, HIDDEN, -1, false, weights, &t));
    size_t rank = my_rank();
    snprintf(final, sizeof final, "%s/%s-rank%zu.safetensors", dir, name, rank);
    CHECK(rename(weights, final) == 0);
    int64_t step = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    CHECK(step == steps);
    fulmen_trainer_free(t);
    CHECK_OK(fulmen_distributed_shutdown(60));
    snprintf(what, sizeof what, "%s rank %zu", name, rank);
    return check_finish(what);
}

static int scenario_manual(const char *dir) {
    manual_mode = true;
    return two_launched_ranks(dir, "manual", "ddp", EPOCHS * (SAMPLES / 2 / RANK_BATCH));
}

static int scenario_fsdp(const char *dir) {
    return two_launched_ranks(dir, "fsdp", "fsdp", EPOCHS * (SAMPLES / 2 / RANK_BATCH));
}

static int scenario_fsdp_manual(const char *dir) {
    manual_mode = true;
    return two_launched_ranks(dir, "fsdp_manual", "fsdp", EPOCHS * (SAMPLES / 2 / RANK_BATCH));
}

/* Every batch of the loader on each rank. */
static int scenario_unsharded(const char *dir) {
    unsharded = true;
    return two_launched_ranks(dir, "unsharded", "ddp", EPOCHS * (SAMPLES / RANK_BATCH));
}

static int scenario_external(const char *dir) {
    size_t rank = (size_t)atoi(getenv("RANK"));
    char root[512], weights[512];
    snprintf(root, sizeof root, "%s/external", dir);
    snprintf(weights, sizeof weights, "%s/external-rank%zu.safetensors", dir, rank);
    fulmen_trainer *t = NULL;
    CHECK_OK(train(root, "ddp", "auto", RANK_BATCH, HIDDEN, -1, false, weights, &t));
    CHECK(my_rank() == rank);
    CHECK(fabs(metric(t, "rank_synced") - 1.0) < 1e-12);
    CHECK(metric(t, "rank_max") == 2.0 && metric(t, "rank_sum") == 3.0);
    /* sync_dist_group of ranks 0 and 1: rank 2 keeps its own values. */
    if (rank < 2)
        CHECK(metric(t, "pair_mean") == 0.5 && metric(t, "pair_sum") == 1.0 && metric(t, "hook_pair_max") == 11.0);
    else
        CHECK(metric(t, "pair_mean") == 2.0 && metric(t, "pair_sum") == 2.0 && metric(t, "hook_pair_max") == 21.0);
    fulmen_trainer_free(t);
    CHECK_OK(fulmen_distributed_shutdown(60));
    return check_finish("external rank");
}

/* ModelCheckpoint(monitor="rank_trend", save_top_k=1) on a metric logged
 * without sync_dist, better every epoch on rank 0 and worse on rank 1:
 * as Lightning's reduce_boolean_decision, a checkpoint replaces the kept
 * one only when every rank finds it better, so the ranks make the same
 * saves (and meet at each) and keep epoch 0's.
 * Rank 1 looks at a folder of its own (a node that cannot see rank 0's
 * disk) where a file already has the first checkpoint's name: rank 0's
 * disk decides the name (Lightning's file_exists broadcast), so rank 1
 * names it epoch=0.ckpt too, not epoch=0-v1.ckpt, and leaves that file
 * alone. */
static int scenario_topk_ranks(const char *dir) {
    char root[512], ckpts[600], expect[700], name[700], planted[700];
    size_t rank = (size_t)atoi(getenv("RANK")); /* before the job is joined */
    snprintf(root, sizeof root, "%s/topk-ranks", dir);
    snprintf(ckpts, sizeof ckpts, "%s/%s", root, rank == 0 ? "checkpoints" : "rank1-checkpoints");
    snprintf(planted, sizeof planted, "%s/epoch=0.ckpt", ckpts);
    if (rank == 1) {
        CHECK(mkdir(root, 0700) == 0 || errno == EEXIST);
        CHECK(mkdir(ckpts, 0700) == 0);
        FILE *f = fopen(planted, "w");
        CHECK(f != NULL && fputs("not a checkpoint", f) >= 0 && fclose(f) == 0);
    }
    fulmen_model_checkpoint_options o = fulmen_model_checkpoint_options_default();
    o.dirpath = ckpts;
    o.monitor = "rank_trend";
    o.filename = "{epoch}";
    checkpoint_opts = &o;
    log_trend = true;
    fulmen_trainer *t = NULL;
    CHECK_OK(train(root, "ddp", "auto", RANK_BATCH, HIDDEN, -1, true, NULL, &t));
    size_t len = 0;
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, name, sizeof name, &len));
    snprintf(expect, sizeof expect, "%s/epoch=0.ckpt", ckpts);
    CHECK(strcmp(name, expect) == 0);
    fulmen_trainer_free(t);
    CHECK_OK(fulmen_distributed_shutdown(60));
    CHECK(count_entries(ckpts) == 1);
    CHECK(access(expect, F_OK) == 0);
    if (rank == 1) {
        char text[64] = {0};
        FILE *f = fopen(planted, "r");
        CHECK(f != NULL && fgets(text, sizeof text, f) != NULL && fclose(f) == 0);
        CHECK(strcmp(text, "not a checkpoint") == 0);
    }
    return check_finish("topk_ranks rank");
}

static int scenario_killed(const char *dir) {
    char root[512];
    snprintf(root, sizeof root, "%s/killed", dir);
    time_t start = time(NULL);
    fulmen_error *e = train(root, "ddp", "2", RANK_BATCH, HIDDEN, 3, false, NULL, NULL);
    double took = difftime(time(NULL), start);
    if (e != NULL) printf("killed: %s\n", fulmen_error_message(e));
    /* The launcher's watcher names the rank that died. */
    CHECK_ERR(e, FULMEN_CODE_DISTRIBUTED, "local rank 1");
    CHECK(took < 60);
    printf("killed: rank 0's fit failed after %.0f s as expected\n", took);
    bool joined = true;
    CHECK_OK(fulmen_distributed_is_joined(&joined));
    CHECK(!joined);
    return check_finish("killed rank 0");
}

/* max_time on ranks whose clocks disagree: they stop at the same step. */
static int scenario_timer(const char *dir) {
    char root[512];
    snprintf(root, sizeof root, "%s/timer", dir);
    max_time = "1";
    fulmen_trainer *t = NULL;
    CHECK_OK(train(root, "ddp", "2", RANK_BATCH, HIDDEN, -1, false, NULL, &t));
    int64_t step = 0;
    CHECK_OK(fulmen_trainer_global_step(t, &step));
    fulmen_trainer_free(t);
    int64_t shape[1] = {2};
    float both[2] = {(float)step, (float)-step}; /* max of step and of -step */
    fulmen_tensor *v = check_f32(both, 2, shape, 1);
    CHECK_OK(fulmen_distributed_all_reduce(v, "max"));
    CHECK(element(v, 0) == -element(v, 1) && step > 0);
    printf("timer rank %zu: stopped at step %lld\n", my_rank(), (long long)step);
    fulmen_tensor_free(v);
    CHECK_OK(fulmen_distributed_shutdown(60));
    return check_finish("timer rank");
}

static int scenario_mismatch(const char *dir) {
    size_t rank = (size_t)atoi(getenv("RANK"));
    char root[512];
    snprintf(root, sizeof root, "%s/mismatch", dir);
    time_t start = time(NULL);
    fulmen_error *e = train(root, "ddp", "auto", RANK_BATCH, rank == 0 ? HIDDEN : HIDDEN + 1, -1, false, NULL, NULL);
    if (e != NULL) printf("mismatch rank %zu: %s\n", rank, fulmen_error_message(e));
    CHECK_ERR(e, FULMEN_CODE_DISTRIBUTED, NULL);
    CHECK(difftime(time(NULL), start) < 60);
    return check_finish("mismatch rank");
}

/* Rank 1's loss turns NaN at step 2 while rank 0 waits in the step's
 * gradient all-reduce: rank 1's fit fails with its reason, and rank 0's,
 * whose collective only sees the connection close, says why: rank 1
 * recorded its reason in the job's store. No launcher (whose watcher
 * would name the exit but not the reason). */
static int scenario_nan_rank(const char *dir) {
    size_t rank = (size_t)atoi(getenv("RANK"));
    char root[512];
    snprintf(root, sizeof root, "%s/nan-rank", dir);
    nan_at_step = 2;
    time_t start = time(NULL);
    fulmen_error *e = train(root, "ddp", "auto", RANK_BATCH, HIDDEN, -1, false, NULL, NULL);
    if (e != NULL) printf("nan_rank rank %zu: %s\n", rank, fulmen_error_message(e));
    if (rank == 1) {
        CHECK_ERR(e, FULMEN_CODE_NON_FINITE, "the loss is NaN");
    } else {
        CHECK(e != NULL && strstr(fulmen_error_message(e), "rank 1 failed: ") != NULL);
        CHECK_ERR(e, FULMEN_CODE_DISTRIBUTED, "the loss is NaN");
    }
    CHECK(difftime(time(NULL), start) < 60);
    return check_finish("nan_rank rank");
}

/* A datamodule whose prepare_data (run on local rank 0 only) fails: every
 * rank's fit ends at once with an error, never waiting for the job's
 * timeout; rank 0 reports its own error, rank 1 that rank 0 failed and why. */
static fulmen_error *failing_prepare_data(void *ud) {
    (void)ud;
    return fulmen_error_new(FULMEN_CODE_IO, "the data server is down");
}

static fulmen_error *blobs_loader(void *ud, int64_t epoch, fulmen_loader **out) {
    (void)epoch;
    *out = fixture_loader(ud, RANK_BATCH, false, 0);
    return NULL;
}

/* A datamodule over `ds` (its train loader) with `prepare_data`. */
static fulmen_datamodule *blobs_datamodule(fulmen_dataset *ds, fulmen_error *(*prepare_data)(void *)) {
    fulmen_datamodule_vtable dv;
    memset(&dv, 0, sizeof dv);
    dv.struct_size = sizeof dv;
    dv.userdata = ds;
    dv.prepare_data = prepare_data;
    dv.train_dataloader = blobs_loader;
    fulmen_datamodule *dm = NULL;
    CHECK_OK(fulmen_datamodule_new(&dv, "Blobs", &dm));
    return dm;
}

static int scenario_prepare_fails(const char *dir) {
    size_t rank = (size_t)atoi(getenv("RANK"));
    char root[512];
    snprintf(root, sizeof root, "%s/prepare_fails", dir);
    fulmen_dataset *ds = fixture_blobs(SAMPLES, 5, 1.0f);
    fulmen_datamodule *dm = blobs_datamodule(ds, failing_prepare_data);
    module_state st = {seeded_mlp(HIDDEN), -1, false};
    fulmen_lightning_module *m = module_for(&st);
    fulmen_trainer_options *o = options(root, "ddp", "auto", false);
    CHECK_OK(fulmen_trainer_options_set(o, "ddp_timeout", "600"));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    time_t start = time(NULL);
    fulmen_error *e = fulmen_trainer_fit_datamodule(t, m, NULL, NULL, dm, NULL);
    if (e != NULL) printf("prepare_fails rank %zu: %s\n", rank, fulmen_error_message(e));
    if (rank == 0) CHECK_ERR(e, FULMEN_CODE_IO, "the data server is down");
    else CHECK_ERR(e, FULMEN_CODE_CALLBACK, "failed on another rank: rank 0 failed: LightningDataModule.prepare_data: "
                                            "prepare_data failed: the data server is down");
    CHECK(difftime(time(NULL), start) < 60);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(st.model);
    fulmen_datamodule_free(dm);
    fulmen_dataset_free(ds);
    return check_finish("prepare_fails rank");
}

/* prepare_data on a job of two nodes with one rank each (node rank =
 * rank): per node (Lightning's default) both ranks prepare, the
 * datamodule's before the module's; with prepare_data_per_node false only
 * global rank 0 does, and the other rank waits for it. */
static int datamodule_prepare_calls;

static fulmen_error *counting_prepare_data(void *ud) {
    (void)ud;
    /* The datamodule's comes first. */
    if (module_prepare_calls != datamodule_prepare_calls) {
        return fulmen_error_new(FULMEN_CODE_INVALID_STATE, "the module prepared before the datamodule");
    }
    datamodule_prepare_calls++;
    return NULL;
}

static int scenario_prepare_nodes(const char *dir) {
    size_t rank = (size_t)atoi(getenv("RANK"));
    char root[512];
    snprintf(root, sizeof root, "%s/prepare_nodes", dir);
    fulmen_dataset *ds = fixture_blobs(SAMPLES, 5, 1.0f);
    fulmen_datamodule *dm = blobs_datamodule(ds, counting_prepare_data);
    module_state st = {seeded_mlp(HIDDEN), -1, false};
    fulmen_lightning_module *m = module_for(&st);
    CHECK_OK(fulmen_lightning_module_override_hook(m, FULMEN_HOOK_PREPARE_DATA, true));
    fulmen_trainer_options *o = options(root, "ddp", "1", false);
    CHECK_OK(fulmen_trainer_options_set_int(o, "num_nodes", 2));
    CHECK_OK(fulmen_trainer_options_set_int(o, "max_epochs", 1));
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);

    CHECK_OK(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, dm, NULL));
    CHECK(datamodule_prepare_calls == 1 && module_prepare_calls == 1);

    CHECK_OK(fulmen_datamodule_set_prepare_data_per_node(dm, false));
    CHECK_OK(fulmen_lightning_module_set_prepare_data_per_node(m, false));
    CHECK_OK(fulmen_trainer_set_max_epochs(t, 2)); /* the next fit trains one more epoch */
    CHECK_OK(fulmen_trainer_fit_datamodule(t, m, NULL, NULL, dm, NULL));
    int expected = rank == 0 ? 2 : 1;
    CHECK(datamodule_prepare_calls == expected && module_prepare_calls == expected);
    printf("prepare_nodes rank %zu: datamodule %d, module %d prepare_data calls\n", rank, datamodule_prepare_calls,
           module_prepare_calls);

    /* The module's own prepare_data fails (on rank 0, where it runs). */
    module_prepare_fails = true;
    time_t start = time(NULL);
    fulmen_error *e = fulmen_trainer_fit_datamodule(t, m, NULL, NULL, dm, NULL);
    if (e != NULL) printf("prepare_nodes rank %zu: %s\n", rank, fulmen_error_message(e));
    if (rank == 0) CHECK_ERR(e, FULMEN_CODE_IO, "the module's data is gone");
    else CHECK_ERR(e, FULMEN_CODE_CALLBACK, "failed on another rank: rank 0 failed: LightningModule.prepare_data");
    CHECK(difftime(time(NULL), start) < 60);
    module_prepare_fails = false;

    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(st.model);
    fulmen_datamodule_free(dm);
    fulmen_dataset_free(ds);
    return check_finish("prepare_nodes rank");
}

/* A host loop's own failure on rank 1 (fulmen_distributed_abort): rank
 * 1 leaves the job, and rank 0, waiting in an all-reduce, fails at once
 * with rank 1's reason rather than gloo's closed connection alone. */
static int scenario_host_abort(const char *dir) {
    (void)dir;
    size_t rank = (size_t)atoi(getenv("RANK"));
    fulmen_strategy *strategy = NULL;
    CHECK_OK(fulmen_strategy_new("ddp", &strategy));
    CHECK_OK(fulmen_strategy_set(strategy, "timeout", "60"));
    CHECK_OK(fulmen_distributed_join(strategy, 1, false));
    fulmen_strategy_free(strategy);
    int64_t shape[1] = {1};
    float one = 1;
    fulmen_tensor *t = check_f32(&one, 1, shape, 1);
    CHECK_OK(fulmen_distributed_all_reduce(t, "sum")); /* the job works */
    bool joined = false;
    time_t start = time(NULL);
    if (rank == 1) {
        const char bad[] = {'\xff', 0};
        CHECK_ERR(fulmen_distributed_abort(bad), FULMEN_CODE_INVALID_ARGUMENT, "UTF-8");
        CHECK_OK(fulmen_distributed_is_joined(&joined));
        CHECK(joined); /* a refused abort leaves the job as it was */
        CHECK_OK(fulmen_distributed_abort("the simulator crashed"));
    } else {
        fulmen_error *e = fulmen_distributed_all_reduce(t, "sum");
        if (e != NULL) printf("host_abort rank 0: %s\n", fulmen_error_message(e));
        CHECK_ERR(e, FULMEN_CODE_DISTRIBUTED, "rank 1 failed: the simulator crashed; on rank 0: ");
        CHECK(difftime(time(NULL), start) < 30);
        CHECK_OK(fulmen_distributed_abort(NULL)); /* this rank leaves the broken job too */
    }
    CHECK_OK(fulmen_distributed_is_joined(&joined));
    CHECK(!joined);
    CHECK_OK(fulmen_distributed_abort("no job left")); /* nothing to end */
    fulmen_tensor_free(t);
    return check_finish("host_abort rank");
}

/* A host-owned loop: sharded loader, fulmen_ddp, and the collectives. */
static int scenario_hostloop(const char *dir) {
    size_t rank = (size_t)atoi(getenv("RANK"));
    fulmen_strategy *strategy = NULL;
    CHECK_OK(fulmen_strategy_new("ddp", &strategy));
    CHECK_OK(fulmen_strategy_set(strategy, "timeout", "30"));
    CHECK_OK(fulmen_distributed_join(strategy, 1, false));
    size_t r = 9, world = 0;
    CHECK_OK(fulmen_distributed_ranks(&r, NULL, &world));
    CHECK(r == rank && world == 2);

    /* Collectives. */
    int64_t shape[1] = {2};
    float vals[2] = {(float)rank + 1, 10};
    fulmen_tensor *t = check_f32(vals, 2, shape, 1), *g = NULL;
    CHECK_OK(fulmen_distributed_all_reduce(t, "sum"));
    CHECK(fabs(element(t, 0) - 3) < 1e-6 && fabs(element(t, 1) - 20) < 1e-6);
    CHECK_OK(fulmen_distributed_all_reduce(t, "mean"));
    CHECK(fabs(element(t, 0) - 3) < 1e-6);
    CHECK_ERR(fulmen_distributed_all_reduce(t, "median"), FULMEN_CODE_INVALID_ARGUMENT, "median");
    /* XLA's in-graph all-reduce takes XLA tensors only; t is left as it was. */
    CHECK_ERR(fulmen_distributed_xla_all_reduce(t, "sum"), FULMEN_CODE_INVALID_ARGUMENT, "XLA device");
    CHECK_ERR(fulmen_distributed_xla_all_reduce(NULL, "sum"), FULMEN_CODE_NULL_ARGUMENT, NULL);
    CHECK(fabs(element(t, 0) - 3) < 1e-6);
    float mine[2] = {(float)rank, (float)rank};
    fulmen_tensor *b = check_f32(mine, 2, shape, 1);
    CHECK_OK(fulmen_distributed_broadcast(b, 1));
    CHECK(fabs(element(b, 0) - 1) < 1e-6);
    CHECK_ERR(fulmen_distributed_broadcast(b, 2), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_OK(fulmen_distributed_all_gather(t, &g));
    size_t numel = 0;
    CHECK_OK(fulmen_tensor_numel(g, &numel));
    CHECK(numel == 4);
    bool any = false, all = true;
    CHECK_OK(fulmen_distributed_reduce_boolean_decision(rank == 1, false, &any));
    CHECK_OK(fulmen_distributed_reduce_boolean_decision(rank == 1, true, &all));
    CHECK(any && !all);
    CHECK_OK(fulmen_distributed_barrier());
    fulmen_tensor_free(t);
    fulmen_tensor_free(b);
    fulmen_tensor_free(g);

    /* Metrics sum their states over the ranks at compute: rank 0 sees
     * [0.9, 0.2] for [1, 0], rank 1 [0.6, 0.4] for [0, 1]. */
    float scores[2] = {rank == 0 ? 0.9f : 0.6f, rank == 0 ? 0.2f : 0.4f};
    int64_t ys[2] = {rank == 0 ? 1 : 0, rank == 0 ? 0 : 1}, two = 2;
    fulmen_tensor *sc = check_f32(scores, 2, shape, 1), *yt = NULL;
    CHECK_OK(fulmen_tensor_from_data(ys, sizeof ys, FULMEN_DTYPE_I64, &two, 1, &yt));
    fulmen_metric_options mo = fulmen_metric_options_default(FULMEN_METRIC_KIND_ACCURACY, 0);
    fulmen_metric *acc = NULL, *local = NULL, *binned = NULL, *exact = NULL;
    CHECK_OK(fulmen_metric_new(&mo, &acc));
    mo.sync_on_compute = false;
    CHECK_OK(fulmen_metric_new(&mo, &local));
    mo = fulmen_metric_options_default(FULMEN_METRIC_KIND_AUROC, 0);
    CHECK_OK(fulmen_metric_new(&mo, &exact));
    mo.thresholds = 11;
    CHECK_OK(fulmen_metric_new(&mo, &binned));
    fulmen_metric *metrics[4] = {acc, local, binned, exact};
    for (int i = 0; i < 4; i++) CHECK_OK(fulmen_metric_update(metrics[i], sc, yt));
    double v = NAN;
    CHECK_OK(fulmen_metric_compute(acc, &v));
    CHECK(v == 0.5);
    CHECK_OK(fulmen_metric_compute(local, &v));
    CHECK(v == (rank == 0 ? 1.0 : 0.0));
    CHECK_OK(fulmen_metric_compute(binned, &v));
    CHECK(fabs(v - 0.75) < 1e-12);
    CHECK_ERR(fulmen_metric_compute(exact, &v), FULMEN_CODE_UNSUPPORTED, "thresholds");
    for (int i = 0; i < 4; i++) fulmen_metric_free(metrics[i]);
    fulmen_tensor_free(sc);
    fulmen_tensor_free(yt);

    /* Training: the same updates as the trainer's DDP. */
    fulmen_dataset *ds = fixture_blobs(SAMPLES, 5, 1.0f);
    fulmen_loader *full = fixture_loader(ds, RANK_BATCH, false, 0), *mine_loader = NULL;
    CHECK_OK(fulmen_loader_shard(full, rank, world, &mine_loader));
    fulmen_model *model = seeded_mlp(HIDDEN);
    fulmen_ddp *ddp = NULL;
    CHECK_OK(fulmen_ddp_new(model, strategy, &ddp));
    fulmen_sgd_options so = fulmen_sgd_options_default();
    so.lr = 0.2;
    so.momentum = 0.9;
    fulmen_optimizer *opt = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(model, NULL, 0, &so, &opt));
    size_t batches = 0;
    CHECK_OK(fulmen_loader_len(mine_loader, &batches));
    CHECK(batches == SAMPLES / 2 / RANK_BATCH);
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        for (size_t i = 0; i < batches; i++) {
            fulmen_tensor *xy[2] = {NULL, NULL}, *logits = NULL, *loss = NULL;
            size_t count = 0;
            CHECK_OK(fulmen_loader_batch(mine_loader, (uint64_t)epoch, i, xy, 2, &count));
            CHECK_OK(fulmen_optimizer_zero_grad(opt));
            CHECK_OK(fulmen_ddp_prepare_forward(ddp));
            CHECK_OK(fulmen_model_forward(model, xy[0], &logits));
            CHECK_OK(fulmen_loss_cross_entropy(logits, xy[1], FULMEN_REDUCTION_MEAN, &loss));
            CHECK_OK(fulmen_ddp_prepare_backward(ddp, loss));
            CHECK_OK(fulmen_tensor_backward(loss));
            CHECK_OK(fulmen_optimizer_step(opt));
            fulmen_tensor_free(xy[0]);
            fulmen_tensor_free(xy[1]);
            fulmen_tensor_free(logits);
            fulmen_tensor_free(loss);
        }
    }
    char weights[512];
    snprintf(weights, sizeof weights, "%s/hostloop-rank%zu.safetensors", dir, rank);
    CHECK_OK(fulmen_model_save(model, weights));
    fulmen_optimizer_free(opt);
    fulmen_ddp_free(ddp);
    fulmen_model_free(model);
    fulmen_loader_free(mine_loader);
    fulmen_loader_free(full);
    fulmen_dataset_free(ds);
    fulmen_strategy_free(strategy);
    CHECK_OK(fulmen_distributed_shutdown(60));
    return check_finish("hostloop rank");
}

/* One step of the FSDP host loop on `model`: zero_grad, forward, backward,
 * the gradients averaged into the shards, a clip that never binds, step. */
static void fsdp_step(fulmen_fsdp *fsdp, fulmen_model *model, fulmen_optimizer *opt, fulmen_loader *loader,
                      uint64_t epoch, size_t i) {
    fulmen_tensor *xy[2] = {NULL, NULL}, *logits = NULL, *loss = NULL;
    size_t count = 0;
    CHECK_OK(fulmen_loader_batch(loader, epoch, i, xy, 2, &count));
    CHECK_OK(fulmen_optimizer_zero_grad(opt));
    CHECK_OK(fulmen_fsdp_prepare_forward(fsdp));
    CHECK_OK(fulmen_model_forward(model, xy[0], &logits));
    CHECK_OK(fulmen_loss_cross_entropy(logits, xy[1], FULMEN_REDUCTION_MEAN, &loss));
    CHECK_OK(fulmen_tensor_backward(loss));
    if (epoch == 0 && i == 1) { /* forgetting finish_backward is caught */
        CHECK_ERR(fulmen_fsdp_prepare_forward(fsdp), FULMEN_CODE_INVALID_STATE, "fulmen_fsdp_finish_backward");
        CHECK_ERR(fulmen_fsdp_clip_grad_norm(fsdp, 1.0, NULL), FULMEN_CODE_INVALID_STATE, "finish_backward");
    }
    CHECK_OK(fulmen_fsdp_finish_backward(fsdp));
    double norm = -1;
    CHECK_OK(fulmen_fsdp_clip_grad_norm(fsdp, 1e6, &norm));
    CHECK(norm > 0 && norm < 1e6);
    /* every rank sees the norm of the whole job's gradients */
    int64_t one = 1;
    float mine = (float)norm;
    fulmen_tensor *n = NULL;
    CHECK_OK(fulmen_tensor_from_data(&mine, sizeof mine, FULMEN_DTYPE_F32, &one, 1, &n));
    CHECK_OK(fulmen_distributed_all_reduce(n, "max"));
    CHECK(fabs(element(n, 0) - mine) <= 1e-6 * mine);
    fulmen_tensor_free(n);
    CHECK_OK(fulmen_optimizer_step(opt));
    fulmen_tensor_free(xy[0]);
    fulmen_tensor_free(xy[1]);
    fulmen_tensor_free(logits);
    fulmen_tensor_free(loss);
}

/* A host-owned loop on fulmen_fsdp: every Linear a sharding unit, SGD with
 * momentum on the shards; after the first epoch the model and the
 * optimizer are gathered, saved, loaded back and sharded again. The
 * weights are the 16-sample reference's. */
static int scenario_fsdp_hostloop(const char *dir) {
    size_t rank = (size_t)atoi(getenv("RANK"));
    fulmen_strategy *strategy = NULL;
    CHECK_OK(fulmen_strategy_new("fsdp", &strategy));
    CHECK_OK(fulmen_strategy_set(strategy, "timeout", "30"));
    CHECK_OK(fulmen_strategy_set(strategy, "auto_wrap_policy", "Linear"));
    fulmen_model *model = seeded_mlp(HIDDEN);
    fulmen_fsdp *fsdp = NULL;
    CHECK_ERR(fulmen_fsdp_new(model, strategy, &fsdp), FULMEN_CODE_INVALID_STATE, "not joined");
    CHECK_OK(fulmen_distributed_join(strategy, 1, false));
    fulmen_dataset *ds = fixture_blobs(SAMPLES, 5, 1.0f);
    fulmen_loader *full = fixture_loader(ds, RANK_BATCH, false, 0), *mine = NULL;
    CHECK_OK(fulmen_loader_shard(full, rank, 2, &mine));

    int64_t whole = 0, sharded = 0, again = 0;
    CHECK_OK(fulmen_model_num_parameters(model, &whole));
    CHECK_OK(fulmen_fsdp_new(model, strategy, &fsdp));
    CHECK_OK(fulmen_model_num_parameters(model, &sharded));
    CHECK(sharded < whole); /* each rank holds its rows only */
    fulmen_fsdp *twice = NULL;
    CHECK_ERR(fulmen_fsdp_new(model, strategy, &twice), FULMEN_CODE_INVALID_STATE, "already sharded");
    CHECK_ERR(fulmen_fsdp_reshard(fsdp, NULL, 0), FULMEN_CODE_INVALID_STATE, "sharded already");

    fulmen_sgd_options so = fulmen_sgd_options_default();
    so.lr = 0.2;
    so.momentum = 0.9;
    fulmen_optimizer *opt = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(model, NULL, 0, &so, &opt));
    fulmen_optimizer *opts[2] = {opt, opt};
    size_t batches = 0;
    CHECK_OK(fulmen_loader_len(mine, &batches));
    char weights[512], state[512];
    snprintf(weights, sizeof weights, "%s/fsdp_hostloop-mid-rank%zu.safetensors", dir, rank);
    snprintf(state, sizeof state, "%s/fsdp_hostloop-opt-rank%zu.safetensors", dir, rank);
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        for (size_t i = 0; i < batches; i++) fsdp_step(fsdp, model, opt, mine, (uint64_t)epoch, i);
        if (epoch != 0) continue;
        /* A checkpoint in the middle: whole parameters and momentum buffers. */
        CHECK_ERR(fulmen_fsdp_unshard(fsdp, opts, 2), FULMEN_CODE_INVALID_ARGUMENT, "repeats");
        CHECK_OK(fulmen_fsdp_unshard(fsdp, opts, 1));
        CHECK_OK(fulmen_model_num_parameters(model, &again));
        CHECK(again == whole);
        CHECK_ERR(fulmen_fsdp_prepare_forward(fsdp), FULMEN_CODE_INVALID_STATE, "unsharded");
        /* A forward of the whole model (on one rank only) leaves it whole. */
        if (rank == 0) {
            fulmen_tensor *xy[2] = {NULL, NULL}, *out = NULL;
            size_t count = 0;
            CHECK_OK(fulmen_loader_batch(mine, 0, 0, xy, 2, &count));
            CHECK_OK(fulmen_model_forward(model, xy[0], &out));
            fulmen_tensor_free(xy[0]);
            fulmen_tensor_free(xy[1]);
            fulmen_tensor_free(out);
        }
        CHECK_OK(fulmen_model_num_parameters(model, &again));
        CHECK(again == whole);
        CHECK_OK(fulmen_model_save(model, weights));
        CHECK_OK(fulmen_optimizer_save_state(opt, state));
        CHECK_OK(fulmen_model_load(model, weights, true));
        CHECK_OK(fulmen_optimizer_load_state(opt, state));
        CHECK_ERR(fulmen_fsdp_reshard(fsdp, NULL, 0), FULMEN_CODE_INVALID_ARGUMENT, "given to fulmen_fsdp_unshard");
        CHECK_OK(fulmen_fsdp_reshard(fsdp, opts, 1));
        CHECK_OK(fulmen_model_num_parameters(model, &again));
        CHECK(again == sharded);
    }
    /* The end of the run: gathered, then let go whole. */
    CHECK_OK(fulmen_fsdp_unshard(fsdp, opts, 1));
    fulmen_fsdp_free(fsdp);
    CHECK_OK(fulmen_model_num_parameters(model, &again));
    CHECK(again == whole);
    snprintf(weights, sizeof weights, "%s/fsdp_hostloop-rank%zu.safetensors", dir, rank);
    CHECK_OK(fulmen_model_save(model, weights));
    fulmen_optimizer_free(opt);
    fulmen_model_free(model);
    fulmen_loader_free(mine);
    fulmen_loader_free(full);
    fulmen_dataset_free(ds);
    fulmen_strategy_free(strategy);
    CHECK_OK(fulmen_distributed_shutdown(60));
    return check_finish("fsdp hostloop rank");
}

/* Rank 1 (started by fulmen's launcher) exits before it joins. */
static int scenario_early_exit(const char *dir, int status) {
    const char *local = getenv("LOCAL_RANK");
    if (local != NULL && strcmp(local, "1") == 0) _exit(status);
    char root[512];
    snprintf(root, sizeof root, "%s/early-exit", dir);
    time_t start = time(NULL);
    fulmen_error *e = train(root, "ddp", "2", RANK_BATCH, HIDDEN, -1, false, NULL, NULL);
    double took = difftime(time(NULL), start);
    char expect[64];
    snprintf(expect, sizeof expect, "exited with status %d", status);
    if (e != NULL) printf("early exit: %s\n", fulmen_error_message(e));
    CHECK(e != NULL && strstr(fulmen_error_message(e), "before all 2 ranks joined") != NULL);
    CHECK_ERR(e, FULMEN_CODE_DISTRIBUTED, expect);
    CHECK(took < 20); /* the strategy's timeout is 30 s */
    return check_finish("early exit rank 0");
}

/* A rank whose launcher (its parent, by FULMEN_LAUNCHER_PID) is gone. */
static int scenario_orphan(const char *dir) {
    char root[512];
    snprintf(root, sizeof root, "%s/orphan", dir);
    time_t start = time(NULL);
    fulmen_error *e = train(root, "ddp", "2", RANK_BATCH, HIDDEN, -1, false, NULL, NULL);
    CHECK_ERR(e, FULMEN_CODE_DISTRIBUTED, "the launching process (local rank 0, pid 1) has exited");
    CHECK(difftime(time(NULL), start) < 20);
    return check_finish("orphan rank");
}

/* torch's env:// contract: RANK and WORLD_SIZE without LOCAL_RANK. */
static int scenario_envrank(const char *dir) {
    size_t rank = (size_t)atoi(getenv("RANK"));
    char root[512], weights[512];
    snprintf(root, sizeof root, "%s/envrank", dir);
    snprintf(weights, sizeof weights, "%s/envrank-rank%zu.safetensors", dir, rank);
    CHECK_OK(train(root, "auto", "1", RANK_BATCH, HIDDEN, -1, false, weights, NULL));
    size_t world = 0;
    CHECK_OK(fulmen_distributed_ranks(NULL, NULL, &world));
    CHECK(my_rank() == rank && world == 2);
    CHECK_OK(fulmen_distributed_shutdown(60));
    return check_finish("env:// rank");
}

/* devices disagrees with SLURM's tasks per node: Lightning's error. */
static int scenario_slurm(const char *dir) {
    char root[512];
    snprintf(root, sizeof root, "%s/slurm", dir);
    CHECK_ERR(train(root, "auto", "1", RANK_BATCH, HIDDEN, -1, false, NULL, NULL), FULMEN_CODE_INVALID_ARGUMENT,
              "`--ntasks-per-node=2` does not match. HINT: Set `devices=2`");
    return check_finish("slurm");
}

/* ---------------------------------------------------------- orchestrator */

static int run(const char *scenario, const char *dir, const char *arg) {
    return ranks_finish(ranks_start(self_path, scenario, dir, arg, NULL), 300);
}

/* Runs `world` ranks of `scenario` with torchrun's variables, on one node
 * or (`node_per_rank`) each on a node of its own. */
static void run_ranks(const char *scenario, const char *dir, int world, int port, int *codes, bool node_per_rank) {
    ranks_run_torchrun(self_path, scenario, dir, world, port, codes, node_per_rank);
}

/* Runs `world` ranks of `scenario` on one node with torchrun's variables. */
static void run_external(const char *scenario, const char *dir, int world, int port, int *codes) {
    run_ranks(scenario, dir, world, port, codes, false);
}

/* Runs `world` ranks of `scenario` with torch's env:// variables only. */
static void run_env_only(const char *scenario, const char *dir, int world, int port, int *codes) {
    pid_t pids[4];
    static char vars[4][3][64];
    for (int r = 0; r < world; r++) {
        snprintf(vars[r][0], 64, "RANK=%d", r);
        snprintf(vars[r][1], 64, "WORLD_SIZE=%d", world);
        snprintf(vars[r][2], 64, "MASTER_PORT=%d", port);
        char *env[] = {vars[r][0], vars[r][1], vars[r][2], "MASTER_ADDR=127.0.0.1", "OMP_NUM_THREADS=1", NULL};
        pids[r] = ranks_start(self_path, scenario, dir, NULL, env);
    }
    for (int r = 0; r < world; r++) codes[r] = ranks_finish(pids[r], 300);
}

/* The largest absolute difference between two saved models. */
static double max_diff(const char *a_path, const char *b_path) {
    fulmen_model *a = seeded_mlp(HIDDEN), *b = seeded_mlp(HIDDEN);
    double worst = INFINITY;
    fulmen_error *ea = fulmen_model_load(a, a_path, true), *eb = fulmen_model_load(b, b_path, true);
    if (ea == NULL && eb == NULL) {
        worst = fixture_max_diff(a, b);
    } else {
        fprintf(stderr, "loading %s / %s: %s\n", a_path, b_path, fulmen_error_message(ea != NULL ? ea : eb));
    }
    fulmen_error_free(ea);
    fulmen_error_free(eb);
    fulmen_model_free(a);
    fulmen_model_free(b);
    return worst;
}

static void expect_same(const char *dir, const char *a, const char *b) {
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    double d = max_diff(pa, pb);
    printf("max |%s - %s| = %.3g\n", a, b, d);
    CHECK(d < 1e-5);
}

/* Entries of a folder besides . and .. (-1 when it cannot be read). */
static int count_entries(const char *path) {
    DIR *d = opendir(path);
    if (d == NULL) return -1;
    int n = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    }
    closedir(d);
    return n;
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc >= 3) {
        const char *s = argv[1], *dir = argv[2];
        if (strcmp(s, "reference") == 0 && argc == 4) return scenario_reference(dir, (size_t)atoi(argv[3]));
        if (strcmp(s, "launcher") == 0) return scenario_launcher(dir);
        if (strcmp(s, "single") == 0) return scenario_single(dir);
        if (strcmp(s, "external") == 0) return scenario_external(dir);
        if (strcmp(s, "killed") == 0) return scenario_killed(dir);
        if (strcmp(s, "topk_ranks") == 0) return scenario_topk_ranks(dir);
        if (strcmp(s, "mismatch") == 0) return scenario_mismatch(dir);
        if (strcmp(s, "nan_rank") == 0) return scenario_nan_rank(dir);
        if (strcmp(s, "prepare_fails") == 0) return scenario_prepare_fails(dir);
        if (strcmp(s, "prepare_nodes") == 0) return scenario_prepare_nodes(dir);
        if (strcmp(s, "timer") == 0) return scenario_timer(dir);
        if (strcmp(s, "hostloop") == 0) return scenario_hostloop(dir);
        if (strcmp(s, "host_abort") == 0) return scenario_host_abort(dir);
        if (strcmp(s, "fsdp_hostloop") == 0) return scenario_fsdp_hostloop(dir);
        if (strcmp(s, "early_exit") == 0 && argc == 4) return scenario_early_exit(dir, atoi(argv[3]));
        if (strcmp(s, "orphan") == 0) return scenario_orphan(dir);
        if (strcmp(s, "envrank") == 0) return scenario_envrank(dir);
        if (strcmp(s, "slurm") == 0) return scenario_slurm(dir);
        if (strcmp(s, "manual") == 0) return scenario_manual(dir);
        if (strcmp(s, "unsharded") == 0) return scenario_unsharded(dir);
        if (strcmp(s, "fsdp") == 0) return scenario_fsdp(dir);
        if (strcmp(s, "fsdp_manual") == 0) return scenario_fsdp_manual(dir);
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    char dir[] = "/tmp/fulmen-ddp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    unsetenv("LOCAL_RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");

    CHECK(run("reference", dir, "16") == 0);
    CHECK(run("reference", dir, "24") == 0);
    CHECK(run("reference", dir, "8") == 0);

    /* A world of one. */
    CHECK(run("single", dir, NULL) == 0);
    expect_same(dir, "reference-16.safetensors", "single.safetensors");

    /* fulmen's own launcher: rank 1 is this program re-executed. */
    CHECK(run("launcher", dir, NULL) == 0);
    expect_same(dir, "reference-16.safetensors", "launcher-rank0.safetensors");
    expect_same(dir, "launcher-rank0.safetensors", "launcher-rank1.safetensors");
    char path[600];
    snprintf(path, sizeof path, "%s/launcher/lightning_logs", dir);
    CHECK(count_entries(path) == 1); /* one version folder: rank 0's */
    snprintf(path, sizeof path, "%s/launcher/lightning_logs/version_0/checkpoints", dir);
    CHECK(count_entries(path) == 1);

    /* Manual optimization under DDP: the step's own backward averages too. */
    CHECK(run("manual", dir, NULL) == 0);
    expect_same(dir, "reference-16.safetensors", "manual-rank0.safetensors");
    expect_same(dir, "manual-rank0.safetensors", "manual-rank1.safetensors");

    /* use_distributed_sampler false: both ranks read every batch; their
     * averaged gradients are one process's with the per-rank batch. */
    /* FSDP: every rank ends with the weights one process reaches on the
     * global batch (the model is whole again after the run). */
    CHECK(run("fsdp", dir, NULL) == 0);
    expect_same(dir, "reference-16.safetensors", "fsdp-rank0.safetensors");
    expect_same(dir, "fsdp-rank0.safetensors", "fsdp-rank1.safetensors");
    CHECK(run("fsdp_manual", dir, NULL) == 0);
    expect_same(dir, "manual-rank0.safetensors", "fsdp_manual-rank0.safetensors");
    expect_same(dir, "fsdp_manual-rank0.safetensors", "fsdp_manual-rank1.safetensors");

    CHECK(run("unsharded", dir, NULL) == 0);
    expect_same(dir, "reference-8.safetensors", "unsharded-rank0.safetensors");
    expect_same(dir, "unsharded-rank0.safetensors", "unsharded-rank1.safetensors");

    /* torchrun's environment, 3 ranks. */
    int codes[4];
    run_external("external", dir, 3, free_port(), codes);
    CHECK(codes[0] == 0 && codes[1] == 0 && codes[2] == 0);
    expect_same(dir, "reference-24.safetensors", "external-rank0.safetensors");
    expect_same(dir, "external-rank0.safetensors", "external-rank2.safetensors");

    run_external("host_abort", dir, 2, free_port(), codes);
    CHECK(codes[0] == 0 && codes[1] == 0);

    /* A host-owned loop reaches the trainer's weights. */
    run_external("hostloop", dir, 2, free_port(), codes);
    CHECK(codes[0] == 0 && codes[1] == 0);
    expect_same(dir, "reference-16.safetensors", "hostloop-rank0.safetensors");
    expect_same(dir, "hostloop-rank0.safetensors", "hostloop-rank1.safetensors");
    run_external("fsdp_hostloop", dir, 2, free_port(), codes);
    CHECK(codes[0] == 0 && codes[1] == 0);
    expect_same(dir, "reference-16.safetensors", "fsdp_hostloop-rank0.safetensors");
    expect_same(dir, "fsdp_hostloop-rank0.safetensors", "fsdp_hostloop-rank1.safetensors");

    /* save_top_k on a metric the ranks disagree on: they agree to keep one. */
    run_external("topk_ranks", dir, 2, free_port(), codes);
    CHECK(codes[0] == 0 && codes[1] == 0);

    /* A Timer that fires at different moments on each rank stops both together. */
    CHECK(run("timer", dir, NULL) == 0);

    /* Faults: a killed rank and mismatched models end with clear errors. */
    CHECK(run("killed", dir, NULL) == 0);
    run_external("mismatch", dir, 2, free_port(), codes);
    CHECK(codes[0] == 0 && codes[1] == 0);
    run_external("nan_rank", dir, 2, free_port(), codes);
    CHECK(codes[0] == 0 && codes[1] == 0);
    run_external("prepare_fails", dir, 2, free_port(), codes);
    CHECK(codes[0] == 0 && codes[1] == 0);
    run_ranks("prepare_nodes", dir, 2, free_port(), codes, true);
    CHECK(codes[0] == 0 && codes[1] == 0);

    /* Start-up faults end at once, not after the timeout. */
    CHECK(run("early_exit", dir, "3") == 0);
    CHECK(run("early_exit", dir, "0") == 0);
    char port_var[64];
    snprintf(port_var, sizeof port_var, "MASTER_PORT=%d", free_port());
    char *orphan_env[] = {"LOCAL_RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", port_var,
                          "FULMEN_LAUNCHER_PID=1", NULL};
    CHECK(ranks_finish(ranks_start(self_path, "orphan", dir, NULL, orphan_env), 120) == 0);
    char *slurm_env[] = {"SLURM_NTASKS=2", "SLURM_NTASKS_PER_NODE=2", "SLURM_NNODES=1", "SLURM_PROCID=0",
                         "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_JOB_ID=4242", "SLURM_JOB_NAME=train", NULL};
    CHECK(ranks_finish(ranks_start(self_path, "slurm", dir, NULL, slurm_env), 120) == 0);

    /* torch's env:// variables alone (no LOCAL_RANK) form the job. */
    run_env_only("envrank", dir, 2, free_port(), codes);
    CHECK(codes[0] == 0 && codes[1] == 0);
    expect_same(dir, "reference-16.safetensors", "envrank-rank0.safetensors");
    expect_same(dir, "envrank-rank0.safetensors", "envrank-rank1.safetensors");

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_ddp");
}
