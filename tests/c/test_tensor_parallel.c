/*
 * Tensor parallelism from C (fulmen_tensor_parallel) across real processes
 * on loopback (c10d's gloo backend).
 *
 * Without arguments this program is the orchestrator: it checks the calls'
 * refusals before any job, trains the plain model in one process, then
 * runs the `tp` scenario as 2 ranks of itself (`test_tensor_parallel tp
 * DIR`) with torchrun's variables. Each rank trains the same batches
 * through the model with its layers split (an Embedding's rows, a
 * column-split Linear feeding a row-split one, a column-split head with
 * its output gathered), gathers, saves, loads and splits again midway,
 * and at the end saves the whole model: every rank's losses and weights
 * are those of the one process.
 */
#define _XOPEN_SOURCE 700 /* fork, kill, putenv, mkdtemp, nanosleep */

#include "check.h"
#include "fixture.h"
#include "ranks.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 16
#define BATCH 12
#define STEPS 8
#define MIDWAY 4
#define MAX_NORM 0.5

/* Embedding(16, 8), Linear(8, 12), Tanh, Linear(12, 8), Linear(8, 16),
 * seeded. */
static fulmen_model *model_new(void) {
    CHECK_OK(fulmen_manual_seed(5));
    fulmen_model *m = NULL, *l = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    CHECK_OK(fulmen_model_embedding_new(VOCAB, 8, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_linear_new(8, 12, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_linear_new(12, 8, true, &l));
    CHECK_OK(fulmen_model_push(m, l));
    CHECK_OK(fulmen_model_linear_new(8, VOCAB, false, &l));
    CHECK_OK(fulmen_model_push(m, l));
    return m;
}

/* The batch of `step`: token ids and the next ids as targets. */
static void batch(int step, fulmen_tensor **ids, fulmen_tensor **targets) {
    int64_t x[BATCH], y[BATCH], shape = BATCH;
    for (int i = 0; i < BATCH; i++) {
        x[i] = (i * (step * 5 + 3) + step) % VOCAB;
        y[i] = (x[i] * 7 + 1) % VOCAB;
    }
    CHECK_OK(fulmen_tensor_from_data(x, sizeof x, FULMEN_DTYPE_I64, &shape, 1, ids));
    CHECK_OK(fulmen_tensor_from_data(y, sizeof y, FULMEN_DTYPE_I64, &shape, 1, targets));
}

/* One step: forward, loss, backward, clipping (by `tp`, or on the plain
 * model when NULL), the optimizer; returns the loss. */
static double step(fulmen_model *model, fulmen_tensor_parallel *tp, fulmen_optimizer *opt, int s) {
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    batch(s, &x, &y);
    CHECK_OK(fulmen_optimizer_zero_grad(opt));
    CHECK_OK(fulmen_model_forward(model, x, &logits));
    CHECK_OK(fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, &loss));
    double value = check_item(loss);
    CHECK_OK(fulmen_tensor_backward(loss));
    double norm = -1;
    if (tp != NULL) {
        CHECK_OK(fulmen_tensor_parallel_clip_grad_norm(tp, MAX_NORM, &norm));
    } else {
        CHECK_OK(fulmen_clip_grad_norm(model, MAX_NORM, 2.0, &norm));
    }
    CHECK(norm > 0);
    CHECK_OK(fulmen_optimizer_step(opt));
    fulmen_tensor *all[4] = {x, y, logits, loss};
    for (int i = 0; i < 4; i++) fulmen_tensor_free(all[i]);
    return value;
}

static fulmen_optimizer *optimizer_new(fulmen_model *model) {
    fulmen_sgd_options so = fulmen_sgd_options_default();
    so.lr = 0.2;
    so.momentum = 0.9;
    fulmen_optimizer *opt = NULL;
    CHECK_OK(fulmen_optimizer_sgd_new(model, NULL, 0, &so, &opt));
    return opt;
}

static const char *const PLAN[] = {"0", "1", "3", "4"};
static const int32_t STYLES[] = {FULMEN_PARALLEL_STYLE_ROWWISE_REPLICATED_INPUT, FULMEN_PARALLEL_STYLE_COLWISE,
                                 FULMEN_PARALLEL_STYLE_ROWWISE, FULMEN_PARALLEL_STYLE_COLWISE_REPLICATED_OUTPUT};

/* One rank: the split model trained, gathered and saved midway, and
 * whole at the end. */
static int scenario_tp(const char *dir) {
    size_t rank = (size_t)atoi(getenv("RANK"));
    fulmen_strategy *strategy = NULL;
    CHECK_OK(fulmen_strategy_new("ddp", &strategy));
    CHECK_OK(fulmen_strategy_set(strategy, "timeout", "30"));
    CHECK_OK(fulmen_distributed_join(strategy, 1, false));
    fulmen_model *model = model_new();
    int64_t whole = 0, split = 0, again = 0;
    CHECK_OK(fulmen_model_num_parameters(model, &whole));

    /* Refused plans leave the model whole. */
    fulmen_tensor_parallel *tp = NULL;
    const char *tanh_path[] = {"2"};
    CHECK_ERR(fulmen_tensor_parallel_new(model, tanh_path, STYLES, 1, &tp), FULMEN_CODE_UNSUPPORTED, "Tanh");
    const char *missing[] = {"7"};
    CHECK_ERR(fulmen_tensor_parallel_new(model, missing, STYLES, 1, &tp), FULMEN_CODE_INVALID_ARGUMENT, "no child");
    const int32_t rowwise_embedding[] = {FULMEN_PARALLEL_STYLE_ROWWISE};
    CHECK_ERR(fulmen_tensor_parallel_new(model, PLAN, rowwise_embedding, 1, &tp), FULMEN_CODE_INVALID_ARGUMENT,
              "input_layouts=Replicate()");
    CHECK(tp == NULL);
    CHECK_OK(fulmen_model_num_parameters(model, &again));
    CHECK(again == whole);

    CHECK_OK(fulmen_tensor_parallel_new(model, PLAN, STYLES, 4, &tp));
    CHECK_OK(fulmen_model_num_parameters(model, &split));
    CHECK(split < whole); /* each rank holds its part of the split layers */
    fulmen_tensor_parallel *twice = NULL;
    CHECK_ERR(fulmen_tensor_parallel_new(model, PLAN, STYLES, 4, &twice), FULMEN_CODE_INVALID_STATE, "split already");
    CHECK_ERR(fulmen_tensor_parallel_reshard(tp, NULL, 0), FULMEN_CODE_INVALID_STATE, "split already");
    CHECK_ERR(fulmen_tensor_parallel_clip_grad_norm(tp, -1.0, NULL), FULMEN_CODE_INVALID_ARGUMENT, "max_norm");

    fulmen_optimizer *opt = optimizer_new(model);
    fulmen_optimizer *opts[2] = {opt, opt};
    char path[512], weights[512], state[512];
    snprintf(path, sizeof path, "%s/losses-rank%zu.txt", dir, rank);
    FILE *losses = fopen(path, "w");
    CHECK(losses != NULL);
    snprintf(weights, sizeof weights, "%s/mid-rank%zu.safetensors", dir, rank);
    snprintf(state, sizeof state, "%s/opt-rank%zu.safetensors", dir, rank);
    for (int s = 0; s < STEPS && losses != NULL; s++) {
        if (s == MIDWAY) {
            CHECK_ERR(fulmen_tensor_parallel_unshard(tp, opts, 2), FULMEN_CODE_INVALID_ARGUMENT, "repeats");
            CHECK_OK(fulmen_tensor_parallel_unshard(tp, opts, 1));
            CHECK_OK(fulmen_model_num_parameters(model, &again));
            CHECK(again == whole);
            CHECK_ERR(fulmen_tensor_parallel_clip_grad_norm(tp, 1.0, NULL), FULMEN_CODE_INVALID_STATE, "unsharded");
            CHECK_OK(fulmen_model_save(model, weights));
            CHECK_OK(fulmen_optimizer_save_state(opt, state));
            CHECK_OK(fulmen_model_load(model, weights, true));
            CHECK_OK(fulmen_optimizer_load_state(opt, state));
            CHECK_ERR(fulmen_tensor_parallel_reshard(tp, NULL, 0), FULMEN_CODE_INVALID_ARGUMENT,
                      "given to fulmen_tensor_parallel_unshard");
            CHECK_OK(fulmen_tensor_parallel_reshard(tp, opts, 1));
            CHECK_OK(fulmen_model_num_parameters(model, &again));
            CHECK(again == split);
        }
        fprintf(losses, "%.17g\n", step(model, tp, opt, s));
    }
    if (losses != NULL) fclose(losses);
    CHECK_OK(fulmen_tensor_parallel_unshard(tp, opts, 1));
    fulmen_tensor_parallel_free(tp);
    fulmen_tensor_parallel_free(NULL);
    CHECK_OK(fulmen_model_num_parameters(model, &again));
    CHECK(again == whole);
    snprintf(weights, sizeof weights, "%s/final-rank%zu.safetensors", dir, rank);
    CHECK_OK(fulmen_model_save(model, weights));

    /* A wrapper freed while split leaves layers that refuse to run. */
    CHECK_OK(fulmen_tensor_parallel_new(model, PLAN + 1, STYLES + 1, 2, &tp));
    fulmen_tensor_parallel_free(tp);
    fulmen_tensor *x = NULL, *y = NULL, *out = NULL;
    batch(0, &x, &y);
    CHECK_ERR(fulmen_model_forward(model, x, &out), FULMEN_CODE_INVALID_STATE, "wrapper was freed");
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);

    fulmen_optimizer_free(opt);
    fulmen_model_free(model);
    fulmen_strategy_free(strategy);
    CHECK_OK(fulmen_distributed_shutdown(60));
    return check_finish("tensor parallel rank");
}

/* The calls' refusals before any job: arguments first, then the job. */
static void refusals_without_a_job(void) {
    fulmen_model *model = model_new();
    fulmen_tensor_parallel *tp = NULL;
    CHECK_ERR(fulmen_tensor_parallel_new(NULL, PLAN, STYLES, 4, &tp), FULMEN_CODE_NULL_ARGUMENT, "model");
    CHECK_ERR(fulmen_tensor_parallel_new(model, PLAN, STYLES, 4, NULL), FULMEN_CODE_NULL_ARGUMENT, "out");
    CHECK_ERR(fulmen_tensor_parallel_new(model, NULL, STYLES, 4, &tp), FULMEN_CODE_NULL_ARGUMENT, "modules");
    CHECK_ERR(fulmen_tensor_parallel_new(model, PLAN, NULL, 4, &tp), FULMEN_CODE_NULL_ARGUMENT, "styles");
    const int32_t bad[] = {7};
    CHECK_ERR(fulmen_tensor_parallel_new(model, PLAN, bad, 1, &tp), FULMEN_CODE_INVALID_ARGUMENT,
              "not a fulmen_parallel_style");
    const char *null_path[] = {NULL};
    CHECK_ERR(fulmen_tensor_parallel_new(model, null_path, STYLES, 1, &tp), FULMEN_CODE_NULL_ARGUMENT, "modules[0]");
    CHECK_ERR(fulmen_tensor_parallel_new(model, PLAN, STYLES, 4, &tp), FULMEN_CODE_INVALID_STATE, "not joined");
    CHECK(tp == NULL);
    CHECK_ERR(fulmen_tensor_parallel_clip_grad_norm(NULL, 1.0, NULL), FULMEN_CODE_NULL_ARGUMENT, "tp");
    CHECK_ERR(fulmen_tensor_parallel_unshard(NULL, NULL, 0), FULMEN_CODE_NULL_ARGUMENT, "tp");
    CHECK_ERR(fulmen_tensor_parallel_reshard(NULL, NULL, 0), FULMEN_CODE_NULL_ARGUMENT, "tp");
    fulmen_tensor_parallel_free(NULL);
    fulmen_model_free(model);
}

/* Reads `n` numbers from `path`; returns how many it read. */
static int read_numbers(const char *path, double *out, int n) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    int i = 0;
    while (i < n && fscanf(f, "%lf", &out[i]) == 1) i++;
    fclose(f);
    return i;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "tp") == 0) return scenario_tp(argv[2]);
    refusals_without_a_job();

    /* The plain model in this process. */
    fulmen_model *plain = model_new();
    fulmen_optimizer *opt = optimizer_new(plain);
    double want[STEPS];
    for (int s = 0; s < STEPS; s++) want[s] = step(plain, NULL, opt, s);
    fulmen_optimizer_free(opt);

    char tmpl[] = "/tmp/fulmen-tp-XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    if (dir == NULL) return check_finish("test_tensor_parallel");
    int codes[2] = {-1, -1};
    ranks_run_torchrun(argv[0], "tp", dir, 2, free_port(), codes, false);
    for (int r = 0; r < 2; r++) {
        CHECK(codes[r] == 0);
        char path[600];
        double got[STEPS];
        snprintf(path, sizeof path, "%s/losses-rank%d.txt", dir, r);
        CHECK(read_numbers(path, got, STEPS) == STEPS);
        for (int s = 0; s < STEPS; s++) CHECK(fabs(got[s] - want[s]) <= 1e-5 * fmax(1.0, fabs(want[s])));
        snprintf(path, sizeof path, "%s/final-rank%d.safetensors", dir, r);
        fulmen_model *loaded = model_new();
        CHECK_OK(fulmen_model_load(loaded, path, true));
        CHECK(fixture_max_diff(loaded, plain) < 1e-5);
        fulmen_model_free(loaded);
        const char *files[] = {"losses-rank%d.txt", "mid-rank%d.safetensors", "opt-rank%d.safetensors",
                               "final-rank%d.safetensors"};
        for (int i = 0; i < 4; i++) {
            char name[64];
            snprintf(name, sizeof name, files[i], r);
            snprintf(path, sizeof path, "%s/%s", dir, name);
            remove(path);
        }
    }
    rmdir(dir);
    fulmen_model_free(plain);
    return check_finish("test_tensor_parallel");
}
