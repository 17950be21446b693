/*
 * DDP on a custom accelerator's own devices: two processes train on
 * fulmen's fake PrivateUse1 device ("npu"), their gradients reduced by the
 * accelerator's collectives hook (examples/c/store_collectives.h,
 * a "communication library" over the job's store) or, without a hook, by
 * gloo through the CPU.
 *
 * Without arguments this program is the orchestrator: it runs each scenario
 * as a child process of itself (`test_device_ddp SCENARIO DIR`):
 *   reference   one CPU process, global batch 16: the weights DDP must reach
 *   hook        strategy "ddp", devices=2 on the npu, reduced by the hook
 *               (fulmen re-executes this program for rank 1)
 *   staged      the same with an accelerator without a hook (gloo)
 *   fsdp_hook   strategy "fsdp" (every Linear a unit) on the npu: the
 *               hook's all_gather gathers the shards, its reduce_scatter
 *               reduces the gradients
 *   fsdp_old_hook  the same with a hook from before reduce_scatter
 *               (struct_size ending before it): its all_reduce serves
 *               the reduce-scatters, the weights the same
 *   fsdp_declining_hook  the same with a reduce_scatter answering
 *               FULMEN_CODE_UNSUPPORTED: asked once, then all_reduce
 *   fsdp_staged the same through gloo on the CPU
 *   reference_clipped  reference with Adam and gradient clipping by norm
 *   fsdp_offload       fsdp_hook with fsdp_cpu_offload, Adam and clipping:
 *               the parameters are CPU tensors between steps (npu ones
 *               without offload, checked in fsdp_hook), and the weights
 *               equal reference_clipped's
 *   fsdp_offload_half, fsdp_offload_resumed  its first epoch with a
 *               full checkpoint, then a resume from it for the second:
 *               the weights equal fsdp_offload's
 *   fsdp_offload_half_sharded, fsdp_offload_resumed_sharded  the same
 *               with a sharded checkpoint (fsdp_state_dict_type=sharded)
 *   reference_deep  a deep MLP (5.3 MB of weights), SGD clipped by norm,
 *               one epoch
 *   fsdp_deep   reference_deep offloaded (fsdp_cpu_offload) on devices of 2.6 MB each
 *               (FULMEN_FAKE_DEVICE_MEMORY_LIMIT): the model reaches the
 *               device unit by unit as it is sharded, is gathered unit by
 *               unit into the host's memory for its full checkpoint, and
 *               comes back the same way; the weights equal reference_deep's
 *   fsdp_deep_resumed  a second epoch resumed from that checkpoint on the
 *               same devices (every rank's weights equal)
 *   oom         the deep MLP on one such device without FSDP: the fit
 *               fails with FULMEN_CODE_OUT_OF_MEMORY naming the device
 *   failing     a world of one whose hook's all_reduce fails: fit fails
 *               with the hook's message
 *   group_new   a world of one whose hook's group_new fails: fit fails
 *               with the code and message it returned
 *   named       a world of one with process_group_backend naming the hook
 *   reentrant   a hook on CPU devices whose slots call back into the job:
 *               refused with clear errors, no deadlock
 *   bad_target_rank1  2 ranks started with torchrun's variables, strategy
 *               "ddp" on the npu, rank 1's class targets out of range at
 *               its third step: the ranks agree on the device's deferred
 *               checks, and both fits fail where they are read (after
 *               step 4), rank 0 naming rank 1, neither waiting for the
 *               other
 *   closure_nan 2 ranks as bad_target_rank1, LBFGS (its closure reads the
 *               loss), rank 1's loss NaN at batch 2: both fits fail at
 *               that evaluation, rank 0 naming another rank's loss
 * and checks the hook's registration rules in-process.
 */
#define _XOPEN_SOURCE 700 /* fork, mkdtemp, nanosleep */

#include "check.h"
#include "fixture.h"
#include "npu.h"
#include "ranks.h"
#include "../../examples/c/store_collectives.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SAMPLES 240
#define RANK_BATCH 8
#define EPOCHS 2
#define HIDDEN 8

static const char *self_path;

/* What train() does besides its arguments (set by a scenario, each in a
 * process of its own). */
static struct {
    const char *clip;      /* gradient_clip_val (NULL: none) */
    bool adam;             /* Adam (lr 0.01) rather than plain SGD */
    bool cpu_offload;      /* fsdp_cpu_offload */
    bool sharded;          /* fsdp_state_dict_type=sharded */
    bool deep;             /* deep_mlp() rather than fixture_mlp(HIDDEN, 0) */
    const char *root;      /* default_root_dir (NULL: no checkpoints) */
    const char *ckpt;      /* fit's ckpt_path */
    int64_t epochs;        /* max_epochs (0: EPOCHS) */
    int32_t param_device;  /* the device type "0.weight" has at each step's start (-1: unchecked) */
    int param_checks;      /* steps whose parameter device was checked */
    bool old_hook;         /* the hook's struct_size ends before reduce_scatter */
    bool declining_hook;   /* the hook's reduce_scatter answers UNSUPPORTED */
    int bad_target_rank;   /* the rank whose class targets lie out of range at batch 2 (-1: none) */
    int nan_rank;          /* the rank whose loss is NaN at batch 2 (-1: none) */
    bool lbfgs;            /* LBFGS (max_iter 3), whose closure reads the loss */
    int64_t log_every;     /* log_every_n_steps (0: the default) */
    int64_t steps_run;     /* training steps this process ran */
    size_t rank_seen;      /* this process's rank, as its steps saw it */
} extra = {NULL, false, false, false, false, NULL, NULL, 0, -1, 0, false, false, -1, -1, false, 0, 0, 0};

/* A reduce_scatter slot of a library without the collective. */
static fulmen_error *declining_reduce_scatter(void *ud, void *group, const fulmen_tensor *input, fulmen_tensor *output,
                                              int32_t op) {
    (void)group;
    (void)input;
    (void)output;
    (void)op;
    ((store_collectives_counts *)ud)->reduce_scatter++;
    return fulmen_error_new(FULMEN_CODE_UNSUPPORTED, "no reduce_scatter in this library");
}

#define DEEP_LAYERS 20
#define DEEP_WIDTH 256

/* 2 -> 256, 20 x (256 -> 256), 256 -> 2, tanh between: 5.3 MB of float32
 * weights, each hidden Linear 263 kB. */
static fulmen_model *deep_mlp(void) {
    fulmen_model *m = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    CHECK_OK(fulmen_model_linear_new(2, DEEP_WIDTH, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    for (int i = 0; i < DEEP_LAYERS; i++) {
        CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l));
        CHECK_OK(fulmen_model_push(m, l));
        CHECK_OK(fulmen_model_linear_new(DEEP_WIDTH, DEEP_WIDTH, true, &l));
        CHECK_OK(fulmen_model_push(m, l));
    }
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_linear_new(DEEP_WIDTH, 2, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    return m;
}

/* The model train() fits. */
static fulmen_model *the_model(void) { return extra.deep ? deep_mlp() : fixture_mlp(HIDDEN, 0); }

typedef struct {
    fulmen_model *model; /* first: fixture_configure_sgd reads it */
} module_state;

static fulmen_error *configure_adam(void *ud, fulmen_optimizer_config *config) {
    return fixture_add_adam(config, *(fulmen_model **)ud, 0.01);
}

static fulmen_error *configure_lbfgs(void *ud, fulmen_optimizer_config *config) {
    fulmen_lbfgs_options o = fulmen_lbfgs_options_default();
    o.max_iter = 3;
    fulmen_optimizer *opt = NULL;
    fulmen_error *made = fulmen_optimizer_lbfgs_new(*(fulmen_model **)ud, NULL, 0, &o, &opt);
    return fixture_add_optimizer(config, made, opt);
}

/* Where the first layer's weight is at the start of a step: under FSDP
 * it holds this rank's shard there, wherever the shards live. */
static void check_param_device(const fulmen_model *model) {
    if (extra.param_device < 0) return;
    fulmen_tensor *w = NULL;
    int32_t type = -1;
    int64_t index = -1;
    CHECK_OK(fulmen_model_state_dict_get(model, "0.weight", &w));
    CHECK_OK(fulmen_tensor_device(w, &type, &index));
    if (type != extra.param_device) fprintf(stderr, "0.weight on device type %d, expected %d\n", type, extra.param_device);
    CHECK(type == extra.param_device);
    extra.param_checks++;
    fulmen_tensor_free(w);
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    module_state *s = ud;
    size_t rank = 0;
    check_param_device(s->model);
    fulmen_error *e = fulmen_distributed_ranks(&rank, NULL, NULL);
    extra.steps_run++;
    extra.rank_seen = rank;
    int64_t idx = -1;
    if (e == NULL && ((int)rank == extra.bad_target_rank || (int)rank == extra.nan_rank))
        e = fulmen_step_context_batch_idx(ctx, &idx);
    if (e == NULL && idx == 2 && (int)rank == extra.bad_target_rank) return fixture_bad_target_loss(s->model, batch, out);
    if (e == NULL && idx == 2 && (int)rank == extra.nan_rank) return fixture_nan_loss(s->model, batch, out);
    if (e == NULL) e = fixture_cross_entropy(s->model, batch, out);
    /* Logged metrics are reduced by gloo on the CPU, beside the hook. */
    if (e == NULL) e = fulmen_step_context_log(ctx, "rank_synced", (double)rank, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_SYNC_DIST, 0);
    return e;
}

/* The accelerator "npu" over the fake device, with `hook` (may be NULL). */
static void register_npu(const fulmen_collectives *hook, void *userdata) {
    CHECK_OK(fulmen_fake_device_register("npu", 2));
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = userdata;
    vt.auto_device_count = npu_count;
    vt.get_parallel_devices = npu_parallel;
    vt.collectives = hook;
    CHECK_OK(fulmen_accelerator_register("npu", "the fake device with a collectives hook", &vt, false));
}

static const char *named_backend = NULL; /* the strategy's process_group_backend */

/* Trains the fixture MLP on `accelerator` with `devices` and per-process
 * batch `batch`; saves the final weights to `weights` (if not NULL). */
static fulmen_error *train(const char *accelerator, const char *strategy, const char *devices,
                           size_t batch, const char *weights, double *synced) {
    fulmen_dataset *ds = fixture_blobs(SAMPLES, 5, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, batch, false, 0);
    CHECK_OK(fulmen_manual_seed(11));
    module_state s = {the_model()};
    fulmen_lightning_module *m =
        fixture_module_with(s.model, &s, training_step, NULL,
                            extra.lbfgs ? configure_lbfgs : extra.adam ? configure_adam : fixture_configure_sgd);
    fulmen_trainer_options *o = fixture_options(extra.root, extra.epochs > 0 ? extra.epochs : EPOCHS);
    if (extra.clip != NULL) CHECK_OK(fulmen_trainer_options_set(o, "gradient_clip_val", extra.clip));
    if (extra.log_every > 0) CHECK_OK(fulmen_trainer_options_set_int(o, "log_every_n_steps", extra.log_every));
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", accelerator));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", devices));
    fulmen_strategy *st = NULL;
    CHECK_OK(fulmen_strategy_new(strategy, &st));
    CHECK_OK(fulmen_strategy_set(st, "timeout", "60"));
    if (named_backend != NULL) CHECK_OK(fulmen_strategy_set(st, "process_group_backend", named_backend));
    if (strcmp(strategy, "fsdp") == 0) CHECK_OK(fulmen_strategy_set(st, "auto_wrap_policy", "Linear"));
    if (extra.cpu_offload) CHECK_OK(fulmen_strategy_set(st, "cpu_offload", "true"));
    if (extra.sharded) CHECK_OK(fulmen_strategy_set(st, "state_dict_type", "sharded"));
    CHECK_OK(fulmen_trainer_options_set_strategy(o, st));
    fulmen_strategy_free(st);
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_error *err = fulmen_trainer_fit(t, m, loader, NULL, extra.ckpt);
    if (err == NULL && weights != NULL) CHECK_OK(fulmen_model_save(s.model, weights));
    if (err == NULL && synced != NULL) CHECK_OK(fulmen_trainer_callback_metric(t, "rank_synced", synced));
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    return err;
}

static size_t my_rank(void) {
    size_t rank = 0;
    CHECK_OK(fulmen_distributed_ranks(&rank, NULL, NULL));
    return rank;
}

/* ------------------------------------------------------------- scenarios */

static int scenario_reference(const char *dir) {
    char weights[512];
    snprintf(weights, sizeof weights, "%s/reference.safetensors", dir);
    CHECK_OK(train("cpu", "single_device", "1", 2 * RANK_BATCH, weights, NULL));
    return check_finish("reference");
}

/* Adam and clipping by norm: what the offloaded optimizers step and clip. */
static void with_adam_and_clipping(void) {
    extra.adam = true;
    extra.clip = "0.3";
}

static int scenario_reference_clipped(const char *dir) {
    char weights[512];
    snprintf(weights, sizeof weights, "%s/reference_clipped.safetensors", dir);
    with_adam_and_clipping();
    CHECK_OK(train("cpu", "single_device", "1", 2 * RANK_BATCH, weights, NULL));
    return check_finish("reference_clipped");
}

static int two_ranks(const char *dir, const char *name, const char *strategy, bool with_hook);
static void register_npu(const fulmen_collectives *hook, void *userdata);

static int scenario_reference_deep(const char *dir) {
    char weights[512];
    snprintf(weights, sizeof weights, "%s/reference_deep.safetensors", dir);
    extra.clip = "0.3"; /* SGD: Adam would magnify the summation order's last bits of the deep net's tiny gradients */
    extra.deep = true;
    extra.epochs = 1;
    CHECK_OK(train("cpu", "single_device", "1", 2 * RANK_BATCH, weights, NULL));
    return check_finish("reference_deep");
}

/* The deep MLP on devices smaller than half of it (its shards offloaded
 * to the host; a step holds a few units' parameters, gradients and
 * collective buffers at a time): it fits only when it reaches the device,
 * goes into a checkpoint and comes back unit by unit. `resumed`: a second
 * epoch from that checkpoint. */
static int scenario_fsdp_deep(const char *dir, bool resumed) {
    char root[512];
    snprintf(root, sizeof root, "%s/deep_root", dir);
    extra.root = root;
    if (resumed) extra.ckpt = "last";
    /* Before the device registers (rank 1 inherits it). */
    CHECK(setenv("FULMEN_FAKE_DEVICE_MEMORY_LIMIT", "2600000", 1) == 0);
    extra.clip = "0.3"; /* SGD: Adam would magnify the summation order's last bits of the deep net's tiny gradients */
    extra.deep = true;
    extra.epochs = resumed ? 2 : 1;
    extra.cpu_offload = true;
    extra.param_device = FULMEN_DEVICE_TYPE_CPU;
    return two_ranks(dir, resumed ? "fsdp_deep_resumed" : "fsdp_deep", "fsdp", true);
}

/* Without FSDP the deep MLP does not fit a capped device: the fit fails
 * with a device's out-of-memory code (what the batch size finder reads),
 * its message naming the device, as a vendor's backend names its own. */
static int scenario_oom(const char *dir) {
    (void)dir;
    CHECK(setenv("FULMEN_FAKE_DEVICE_MEMORY_LIMIT", "2600000", 1) == 0);
    register_npu(NULL, NULL);
    extra.deep = true;
    extra.epochs = 1;
    fulmen_error *e = train("npu", "single_device", "1", RANK_BATCH, NULL, NULL);
    CHECK_ERR(e, FULMEN_CODE_OUT_OF_MEMORY, "npu out of memory");
    CHECK_OK(fulmen_accelerator_unregister("npu"));
    return check_finish("oom");
}

/* Two launched ranks of `strategy` on npu:0 and npu:1; each saves
 * <name>-rank<N>. */
static int two_ranks(const char *dir, const char *name, const char *strategy, bool with_hook) {
    store_collectives_counts counts = {0};
    fulmen_collectives hook = store_collectives_table();
    if (extra.old_hook) hook.struct_size = offsetof(fulmen_collectives, reduce_scatter);
    if (extra.declining_hook) hook.reduce_scatter = declining_reduce_scatter;
    register_npu(with_hook ? &hook : NULL, &counts);
    char weights[512], final[512], what[64];
    snprintf(weights, sizeof weights, "%s/%s-tmp-%d.safetensors", dir, name, (int)getpid());
    double synced = -1;
    CHECK_OK(train("npu", strategy, "2", RANK_BATCH, weights, &synced));
    size_t rank = my_rank();
    snprintf(final, sizeof final, "%s/%s-rank%zu.safetensors", dir, name, rank);
    CHECK(rename(weights, final) == 0);
    CHECK(fabs(synced - 0.5) < 1e-12);
    /* A resume here continues from the first of two epochs. */
    int64_t epochs = extra.ckpt != NULL ? 1 : (extra.epochs > 0 ? extra.epochs : EPOCHS);
    int64_t steps = epochs * (SAMPLES / 2 / RANK_BATCH);
    if (extra.param_device >= 0) CHECK(extra.param_checks == steps);
    if (with_hook) {
        /* One group; the module state broadcast, every step's gradient
         * buckets (FSDP: reduce-scatters, through all_reduce for a hook
         * without reduce_scatter) and the parameter check (FSDP: and the
         * gathers) went through the hook. */
        bool fsdp = strcmp(strategy, "fsdp") == 0;
        bool scatters = fsdp && !extra.old_hook && !extra.declining_hook;
        CHECK(counts.group_new == 1);
        CHECK(counts.broadcast >= 1);
        CHECK(counts.all_gather >= 1);
        /* FSDP's gradients through reduce_scatter leave all_reduce nothing
         * (clipping's norms of npu shards go through gloo). A declining
         * slot is asked once. */
        CHECK(scatters ? counts.reduce_scatter >= steps && counts.all_reduce == 0 : counts.all_reduce >= steps);
        if (!scatters) CHECK(counts.reduce_scatter == (fsdp && extra.declining_hook ? 1 : 0));
        printf("%s rank %zu: hook calls: %d all_reduce, %d reduce_scatter, %d broadcast, %d all_gather\n", name, rank,
               counts.all_reduce, counts.reduce_scatter, counts.broadcast, counts.all_gather);
    } else {
        CHECK(counts.group_new == 0 && counts.all_reduce == 0);
    }
    CHECK_OK(fulmen_distributed_shutdown(60));
    /* The group is closed with the job. */
    if (with_hook) CHECK(counts.group_free == 1);
    CHECK_OK(fulmen_accelerator_unregister("npu"));
    snprintf(what, sizeof what, "%s rank %zu", name, rank);
    return check_finish(what);
}

/* Runs fit on two ranks of "ddp" on the npu (started with torchrun's
 * variables) in which rank 1's step 2 goes wrong, as `extra` says: each
 * fit fails with `code`, rank 1 with `own` in its error, rank 0 with
 * `other`, after between `min_steps` and `max_steps` training_step calls
 * on each rank, and neither waits in a collective for the other. */
static int one_rank_fails(const char *name, int32_t code, const char *own, const char *other, int64_t min_steps,
                          int64_t max_steps) {
    store_collectives_counts counts = {0};
    fulmen_collectives hook = store_collectives_table();
    register_npu(&hook, &counts);
    extra.epochs = 1;
    fulmen_error *e = train("npu", "ddp", "2", RANK_BATCH, NULL, NULL);
    size_t rank = (size_t)atoi(getenv("RANK"));
    CHECK(extra.rank_seen == rank);
    CHECK_ERR(e, code, rank == 1 ? own : other);
    if (extra.steps_run < min_steps || extra.steps_run > max_steps)
        fprintf(stderr, "%s rank %zu: %lld steps\n", name, rank, (long long)extra.steps_run);
    CHECK(extra.steps_run >= min_steps && extra.steps_run <= max_steps);
    fulmen_error_free(fulmen_distributed_shutdown(60));
    CHECK_OK(fulmen_accelerator_unregister("npu"));
    char what[64];
    snprintf(what, sizeof what, "%s rank %zu", name, rank);
    return check_finish(what);
}

/* Rank 1's class targets lie out of range at batch 2 and log_every_n_steps
 * is 4: on a device that is found where the trainer reads its values,
 * after step 4 (the step itself ran on harmless targets, so rank 0's
 * gradients stay finite and its own checks pass). Each rank stops there,
 * rank 1 with its own check's error, rank 0 naming rank 1, rather than
 * rank 0 going on to wait in step 5's gradient all-reduce for a rank
 * that stopped. */
static int scenario_bad_target_rank1(void) {
    extra.bad_target_rank = 1;
    extra.log_every = 4;
    return one_rank_fails("bad_target_rank1", FULMEN_CODE_OUT_OF_RANGE, "class target lay outside",
                          "failed on rank 1 in a step between global steps 0 and 4", 4, 4);
}

/* LBFGS reads the loss in its closure (after backward) and the ranks take
 * its mean there: rank 1's NaN at batch 2 is refused on both ranks at
 * that evaluation, so neither waits in the mean for the other. Batches 0
 * and 1 are evaluated at most max_iter (+1) times each, batch 2 once. */
static int scenario_closure_nan(void) {
    extra.nan_rank = 1;
    extra.lbfgs = true;
    return one_rank_fails("closure_nan", FULMEN_CODE_NON_FINITE, "the loss is NaN; no update was made",
                          "another rank's loss was not finite", 3, 9);
}

static store_collectives_counts failing_counts;

static fulmen_error *failing_all_reduce(void *ud, void *group, fulmen_tensor *const *tensors, size_t n, int32_t op) {
    (void)ud;
    (void)group;
    (void)tensors;
    (void)n;
    (void)op;
    failing_counts.all_reduce++;
    return fulmen_error_new(FULMEN_CODE_CALLBACK, "the interconnect is down (injected)");
}

static int scenario_failing(const char *dir) {
    fulmen_collectives hook = store_collectives_table();
    hook.all_reduce = failing_all_reduce;
    register_npu(&hook, NULL);
    (void)dir;
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    fulmen_error *e = train("npu", "ddp", "1", RANK_BATCH, NULL, NULL);
    CHECK(e != NULL);
    if (e != NULL) {
        const char *msg = fulmen_error_message(e);
        printf("failing hook: code %d: %s\n", fulmen_error_code(e), msg);
        CHECK(fulmen_error_code(e) == FULMEN_CODE_DISTRIBUTED);
        CHECK(strstr(msg, "interconnect is down (injected)") != NULL);
        CHECK(strstr(msg, "all_reduce") != NULL);
        fulmen_error_free(e);
    }
    CHECK(failing_counts.all_reduce == 1);
    fulmen_error_free(fulmen_distributed_shutdown(60));
    return check_finish("failing");
}

static fulmen_error *failing_group_new(void *ud, const fulmen_dist_store *store, int32_t rank, int32_t world,
                                       fulmen_device device, void **out) {
    (void)ud;
    (void)store;
    (void)rank;
    (void)world;
    (void)device;
    (void)out;
    failing_counts.group_new++;
    return fulmen_error_new(FULMEN_CODE_UNAVAILABLE, "no interconnect on this node (injected)");
}

static int scenario_group_new(const char *dir) {
    fulmen_collectives hook = store_collectives_table();
    hook.group_new = failing_group_new;
    register_npu(&hook, NULL);
    (void)dir;
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    /* As any host callback's error: the code group_new returned, its
     * message, naming the slot; no group to free, no job joined. */
    fulmen_error *e = train("npu", "ddp", "1", RANK_BATCH, NULL, NULL);
    CHECK(e != NULL);
    if (e != NULL) {
        const char *msg = fulmen_error_message(e);
        printf("failing group_new: code %d: %s\n", fulmen_error_code(e), msg);
        CHECK(fulmen_error_code(e) == FULMEN_CODE_UNAVAILABLE);
        CHECK(strstr(msg, "no interconnect on this node (injected)") != NULL);
        CHECK(strstr(msg, "group_new") != NULL);
        fulmen_error_free(e);
    }
    CHECK(failing_counts.group_new == 1);
    bool joined = true;
    CHECK_OK(fulmen_distributed_is_joined(&joined));
    CHECK(!joined);
    CHECK_OK(fulmen_distributed_shutdown(60));
    return check_finish("group_new");
}

static int scenario_named(const char *dir) {
    (void)dir;
    store_collectives_counts counts = {0};
    fulmen_collectives hook = store_collectives_table();
    register_npu(&hook, &counts);
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    named_backend = "storecc";
    CHECK_OK(train("npu", "ddp", "1", RANK_BATCH, NULL, NULL));
    CHECK(counts.group_new == 1 && counts.all_reduce > 0);
    CHECK_OK(fulmen_distributed_shutdown(60));
    CHECK(counts.group_free == 1);
    return check_finish("named");
}

/* Slots that call back into the job they serve. */
static int reentrant_calls;

static fulmen_error *reentrant_group_new(void *ud, const fulmen_dist_store *store, int32_t rank, int32_t world,
                                         fulmen_device device, void **out) {
    /* The job is forming: readable, not joinable. */
    bool joined = true;
    CHECK_OK(fulmen_distributed_is_joined(&joined));
    CHECK(!joined);
    fulmen_strategy *s = NULL;
    CHECK_OK(fulmen_strategy_new("ddp", &s));
    CHECK_ERR(fulmen_distributed_join(s, 1, false), FULMEN_CODE_INVALID_STATE, "inside its own join");
    fulmen_strategy_free(s);
    return sc_group_new(ud, store, rank, world, device, out);
}

static fulmen_error *reentrant_all_reduce(void *ud, void *group, fulmen_tensor *const *tensors, size_t n,
                                          int32_t op) {
    /* A slot cannot start a collective of its own job (on CPU devices the
     * hook is the job's only backend: it would come back to the hook), nor
     * shut the job down under the collective it runs. */
    reentrant_calls++;
    CHECK_ERR(fulmen_distributed_barrier(), FULMEN_CODE_INVALID_STATE, "inside a collectives slot");
    CHECK_ERR(fulmen_distributed_shutdown(60), FULMEN_CODE_INVALID_STATE, "inside a collectives slot");
    return sc_all_reduce(ud, group, tensors, n, op);
}

static int scenario_reentrant(const char *dir) {
    (void)dir;
    fulmen_collectives hook = store_collectives_table();
    hook.group_new = reentrant_group_new;
    hook.all_reduce = reentrant_all_reduce;
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.collectives = &hook; /* CPU devices (no get_parallel_devices) */
    CHECK_OK(fulmen_accelerator_register("cpu_hooked", "CPU tensors, a vendor's collectives", &vt, false));
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    CHECK_OK(train("cpu_hooked", "ddp", "1", RANK_BATCH, NULL, NULL));
    CHECK(reentrant_calls > 0);
    /* The refused shutdowns left the job alone; this one ends it. */
    bool joined = false;
    CHECK_OK(fulmen_distributed_is_joined(&joined));
    CHECK(joined);
    CHECK_OK(fulmen_distributed_shutdown(60));
    CHECK_OK(fulmen_distributed_is_joined(&joined));
    CHECK(!joined);
    return check_finish("reentrant");
}

/* ------------------------------------------------------ registration rules */

static void expect_refused(const fulmen_collectives *hook, const char *why) {
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.collectives = hook;
    fulmen_error *e = fulmen_accelerator_register("refused_npu", why, &vt, false);
    if (fixture_code(e) == 0) {
        fprintf(stderr, "registration accepted: %s\n", why);
        check_failed++;
        CHECK_OK(fulmen_accelerator_unregister("refused_npu"));
    }
}

static void check_registration(void) {
    fulmen_collectives hook = store_collectives_table();
    hook.name = "gloo";
    expect_refused(&hook, "a reserved name");
    hook.name = "Bad Name";
    expect_refused(&hook, "a malformed name");
    hook.name = NULL;
    expect_refused(&hook, "no name");
    hook = store_collectives_table();
    hook.all_reduce = NULL;
    expect_refused(&hook, "no all_reduce");
    hook = store_collectives_table();
    hook.barrier = NULL;
    expect_refused(&hook, "no barrier");
    hook = store_collectives_table();
    hook.struct_size = offsetof(fulmen_collectives, reduce_scatter) - 1;
    expect_refused(&hook, "struct_size too small");
    /* Backends fulmen does not build are refused by name. */
    fulmen_strategy *mpi = NULL;
    CHECK_OK(fulmen_strategy_new("ddp", &mpi));
    CHECK_ERR(fulmen_strategy_set(mpi, "process_group_backend", "mpi"), FULMEN_CODE_INVALID_ARGUMENT, "no \"mpi\"");
    CHECK_ERR(fulmen_strategy_set(mpi, "process_group_backend", "Bad Name"), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    fulmen_strategy_free(mpi);
    /* A hook and process_group_backend naming another backend: refused. */
    hook = store_collectives_table();
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.collectives = &hook;
    vt.auto_device_count = npu_count;
    vt.get_parallel_devices = npu_parallel;
    CHECK_OK(fulmen_fake_device_register("npu", 2));
    CHECK_OK(fulmen_accelerator_register("npu_hooked", "", &vt, false));
    fulmen_trainer_options *o = fixture_options(NULL, 1);
    CHECK_OK(fulmen_trainer_options_set(o, "accelerator", "npu_hooked"));
    CHECK_OK(fulmen_trainer_options_set(o, "devices", "1"));
    fulmen_strategy *st = NULL;
    CHECK_OK(fulmen_strategy_new("ddp", &st));
    CHECK_OK(fulmen_strategy_set(st, "process_group_backend", "nccl"));
    CHECK_OK(fulmen_trainer_options_set_strategy(o, st));
    fulmen_strategy_free(st);
    fulmen_trainer *t = NULL;
    CHECK_OK(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    fulmen_dataset *ds = fixture_blobs(16, 5, 1.0f);
    fulmen_loader *loader = fixture_loader(ds, 8, false, 0);
    CHECK_OK(fulmen_manual_seed(1));
    module_state s = {fixture_mlp(HIDDEN, 0)};
    fulmen_lightning_module *m = fixture_module(s.model, &s, training_step, NULL);
    fulmen_error *e = fulmen_trainer_fit(t, m, loader, NULL, NULL);
    CHECK_ERR(e, FULMEN_CODE_INVALID_ARGUMENT, "cannot reduce tensors on");
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(s.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    CHECK_OK(fulmen_accelerator_unregister("npu_hooked"));
}

/* ------------------------------------------------------------ orchestrator */

static int run(const char *scenario, const char *dir) {
    return ranks_finish(ranks_start(self_path, scenario, dir, NULL, NULL), 300);
}

static void expect_same(const char *dir, const char *a, const char *b) {
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    CHECK_OK(fulmen_manual_seed(11));
    fulmen_model *ma = the_model(), *mb = the_model();
    double d = INFINITY;
    if (fixture_code(fulmen_model_load(ma, pa, true)) == 0 && fixture_code(fulmen_model_load(mb, pb, true)) == 0)
        d = fixture_max_diff(ma, mb);
    printf("max |%s - %s| = %.3g\n", a, b, d);
    CHECK(d < 1e-5);
    fulmen_model_free(ma);
    fulmen_model_free(mb);
}

/* Runs the two-rank `scenario`: both ranks end with the weights of
 * `reference` (a file in `dir`). */
static void expect_ranks_equal(const char *dir, const char *scenario, const char *reference) {
    char rank0[128], rank1[128];
    snprintf(rank0, sizeof rank0, "%s-rank0.safetensors", scenario);
    snprintf(rank1, sizeof rank1, "%s-rank1.safetensors", scenario);
    CHECK(run(scenario, dir) == 0);
    expect_same(dir, reference, rank0);
    expect_same(dir, rank0, rank1);
}

/* fsdp_offload_half<suffix> then fsdp_offload_resumed<suffix>: the
 * resumed weights equal the uninterrupted fsdp_offload's, on both ranks. */
static void expect_offload_resume(const char *dir, const char *suffix) {
    char half[64], resumed[64], rank0[96], rank1[96];
    snprintf(half, sizeof half, "fsdp_offload_half%s", suffix);
    snprintf(resumed, sizeof resumed, "fsdp_offload_resumed%s", suffix);
    snprintf(rank0, sizeof rank0, "%s-rank0.safetensors", resumed);
    snprintf(rank1, sizeof rank1, "%s-rank1.safetensors", resumed);
    CHECK(run(half, dir) == 0);
    CHECK(run(resumed, dir) == 0);
    expect_same(dir, "fsdp_offload-rank0.safetensors", rank0);
    expect_same(dir, rank0, rank1);
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc == 3) {
        const char *s = argv[1], *dir = argv[2];
        if (strcmp(s, "reference") == 0) return scenario_reference(dir);
        if (strcmp(s, "hook") == 0) return two_ranks(dir, "hook", "ddp", true);
        if (strcmp(s, "staged") == 0) return two_ranks(dir, "staged", "ddp", false);
        if (strcmp(s, "fsdp_hook") == 0) {
            extra.param_device = FULMEN_DEVICE_TYPE_PRIVATE_USE1;
            return two_ranks(dir, "fsdp_hook", "fsdp", true);
        }
        if (strcmp(s, "fsdp_old_hook") == 0) {
            extra.old_hook = true;
            return two_ranks(dir, "fsdp_old_hook", "fsdp", true);
        }
        if (strcmp(s, "fsdp_declining_hook") == 0) {
            extra.declining_hook = true;
            return two_ranks(dir, "fsdp_declining_hook", "fsdp", true);
        }
        if (strcmp(s, "reference_clipped") == 0) return scenario_reference_clipped(dir);
        if (strcmp(s, "reference_deep") == 0) return scenario_reference_deep(dir);
        if (strcmp(s, "fsdp_deep") == 0) return scenario_fsdp_deep(dir, false);
        if (strcmp(s, "fsdp_deep_resumed") == 0) return scenario_fsdp_deep(dir, true);
        if (strcmp(s, "oom") == 0) return scenario_oom(dir);
        if (strncmp(s, "fsdp_offload", 12) == 0) {
            char root[512];
            extra.sharded = strstr(s, "_sharded") != NULL;
            snprintf(root, sizeof root, "%s/offload_root%s", dir, extra.sharded ? "_sharded" : "");
            with_adam_and_clipping();
            extra.cpu_offload = true;
            extra.param_device = FULMEN_DEVICE_TYPE_CPU;
            if (strncmp(s, "fsdp_offload_half", 17) == 0) {
                extra.root = root;
                extra.epochs = 1;
            } else if (strncmp(s, "fsdp_offload_resumed", 20) == 0) {
                extra.root = root;
                extra.ckpt = "last";
            } else if (strcmp(s, "fsdp_offload") != 0) {
                fprintf(stderr, "unknown scenario %s\n", s);
                return 2;
            }
            return two_ranks(dir, s, "fsdp", true);
        }
        if (strcmp(s, "fsdp_staged") == 0) return two_ranks(dir, "fsdp_staged", "fsdp", false);
        if (strcmp(s, "failing") == 0) return scenario_failing(dir);
        if (strcmp(s, "group_new") == 0) return scenario_group_new(dir);
        if (strcmp(s, "named") == 0) return scenario_named(dir);
        if (strcmp(s, "reentrant") == 0) return scenario_reentrant(dir);
        if (strcmp(s, "bad_target_rank1") == 0) return scenario_bad_target_rank1();
        if (strcmp(s, "closure_nan") == 0) return scenario_closure_nan();
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    char dir[] = "/tmp/fulmen-device-ddp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    unsetenv("LOCAL_RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");

    CHECK(run("reference", dir) == 0);
    expect_ranks_equal(dir, "hook", "reference.safetensors");
    expect_ranks_equal(dir, "staged", "reference.safetensors");
    expect_ranks_equal(dir, "fsdp_hook", "reference.safetensors");
    expect_ranks_equal(dir, "fsdp_old_hook", "fsdp_hook-rank0.safetensors");
    expect_ranks_equal(dir, "fsdp_declining_hook", "fsdp_hook-rank0.safetensors");
    expect_ranks_equal(dir, "fsdp_staged", "reference.safetensors");
    CHECK(run("reference_clipped", dir) == 0);
    expect_ranks_equal(dir, "fsdp_offload", "reference_clipped.safetensors");
    expect_offload_resume(dir, "");
    expect_offload_resume(dir, "_sharded");
    CHECK(run("reference_deep", dir) == 0);
    extra.deep = true; /* the_model() of the deep scenarios */
    expect_ranks_equal(dir, "fsdp_deep", "reference_deep.safetensors");
    CHECK(run("fsdp_deep_resumed", dir) == 0);
    expect_same(dir, "fsdp_deep_resumed-rank0.safetensors", "fsdp_deep_resumed-rank1.safetensors");
    CHECK(run("oom", dir) == 0);
    extra.deep = false;
    CHECK(run("failing", dir) == 0);
    CHECK(run("group_new", dir) == 0);
    CHECK(run("named", dir) == 0);
    CHECK(run("reentrant", dir) == 0);
    /* Started by this program, not fulmen's launcher (which ends the
     * ranks it launched once its own fit fails): each rank's report. */
    int codes[2] = {-1, -1};
    ranks_run_torchrun(self_path, "bad_target_rank1", dir, 2, free_port(), codes, false);
    CHECK(codes[0] == 0 && codes[1] == 0);
    codes[0] = codes[1] = -1;
    ranks_run_torchrun(self_path, "closure_nan", dir, 2, free_port(), codes, false);
    CHECK(codes[0] == 0 && codes[1] == 0);

    check_registration();

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (check_failed == 0) CHECK(system(cmd) == 0);
    return check_finish("test_device_ddp");
}
