/*
 * The xla accelerator and strategy on PJRT's CPU device (`make test-xla`:
 * fulmen built against the libtorch 2.9 of scripts/fetch-xla.sh, with
 * PJRT_DEVICE=CPU and CPU_NUM_DEVICES=2 set).
 *
 * Without arguments this program is the orchestrator: it runs each scenario
 * as a child process of itself (`test_xla fit DIR NAME ACCELERATOR DEVICES
 * STRATEGY BATCH EPOCHS [RESUME]`), each writing its per-step losses
 * (NAME.losses) and final weights (NAME.safetensors), and compares them:
 *   - the MNIST MLP on xla:0 loses what it loses on the CPU, step by step;
 *   - a checkpoint written on xla:0 resumes on the CPU, and one written on
 *     the CPU resumes on xla:0, each as the uninterrupted run;
 *   - `dp` over xla:0 and xla:1 (one process) equals one device;
 *   - the xla strategy over 2 processes (fulmen's launcher), each with a
 *     batch of 16, ends with the weights of one process with a batch of 32
 *     (averaging gradients through gloo: each process is a PJRT job of its
 *     own here);
 *   - XLA's own all-reduce runs in the device's graph, and is refused where
 *     it would not reach the job's ranks (two devices in a process; two
 *     ranks of one device each, each a PJRT job of its own).
 * Not run under ASan: the embedded interpreter and torch_xla live as long
 * as the process and are never freed.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */

#include <fulmen.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_STEPS 256
#define LIMIT_BATCHES 12

static int failed = 0;

#define EXPECT(cond, ...)                                                  \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            failed++;                                                      \
        }                                                                  \
    } while (0)

static void ok(fulmen_error *e, const char *what) {
    if (e != NULL) {
        fprintf(stderr, "test_xla: %s: %s (code %d)\n", what, fulmen_error_message(e), fulmen_error_code(e));
        fulmen_error_free(e);
        exit(1);
    }
}

/* ------------------------------------------------------------ scenario */

typedef struct {
    fulmen_model *model;
    int32_t device_type; /* where every batch must be: FULMEN_DEVICE_TYPE_* */
    double losses[MAX_STEPS];
    size_t steps;
} task;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    task *t = ud;
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL;
    (void)ctx;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    int32_t type = -1;
    int64_t index = -1;
    if (e == NULL) e = fulmen_tensor_device(x, &type, &index);
    if (e == NULL && type != t->device_type) {
        fprintf(stderr, "test_xla: a batch on device type %d, not %d\n", (int)type, (int)t->device_type);
        exit(1);
    }
    if (e == NULL) e = fulmen_model_forward(t->model, x, &logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(logits, y, FULMEN_REDUCTION_MEAN, out);
    double v = 0;
    if (e == NULL) e = fulmen_tensor_item(*out, &v);
    if (e == NULL && t->steps < MAX_STEPS) t->losses[t->steps++] = v;
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    task *t = ud;
    fulmen_adam_options o = fulmen_adam_options_default();
    o.lr = 1e-3;
    fulmen_optimizer *adam = NULL;
    fulmen_error *e = fulmen_optimizer_adam_new(t->model, NULL, 0, &o, &adam);
    if (e != NULL) return e;
    e = fulmen_optimizer_config_add(config, adam, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(adam);
    return e;
}

static fulmen_model *mlp(void) {
    fulmen_model *m = NULL, *l = NULL;
    ok(fulmen_manual_seed(7), "seed");
    ok(fulmen_model_sequential_new(&m), "sequential");
    ok(fulmen_model_linear_new(784, 64, true, &l), "linear");
    ok(fulmen_model_push(m, l), "push");
    ok(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l), "relu");
    ok(fulmen_model_push(m, l), "push");
    ok(fulmen_model_linear_new(64, 10, true, &l), "linear");
    ok(fulmen_model_push(m, l), "push");
    return m;
}

/* The LightningModule of `t` (its training step and Adam). */
static fulmen_lightning_module *module_for(task *t) {
    fulmen_module_vtable vt = {0};
    vt.struct_size = sizeof vt;
    vt.userdata = t;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *module = NULL;
    ok(fulmen_lightning_module_new(&vt, t->model, &module), "module");
    return module;
}

/* Trains and writes DIR/NAME.losses (one per line, this process's steps)
 * and, on rank 0, DIR/NAME.safetensors and DIR/NAME/last.ckpt. */
static int scenario_fit(const char *dir, const char *name, const char *accelerator, const char *devices,
                        const char *strategy, long batch, long epochs, const char *resume);

/* A mixed precision on xla is refused before anything runs, as Lightning's
 * XLAPrecision refuses it; an XLA device that does not exist too. */
static int scenario_refusals(void) {
    task t = {mlp(), FULMEN_DEVICE_TYPE_XLA, {0}, 0};
    fulmen_lightning_module *module = module_for(&t);
    fulmen_tensor *x = NULL;
    int64_t shape[2] = {4, 784};
    ok(fulmen_tensor_zeros(shape, 2, FULMEN_DTYPE_F32, &x), "zeros");
    const fulmen_tensor *cols[2] = {x, x};
    fulmen_dataset *ds = NULL;
    ok(fulmen_dataset_from_tensors(cols, 1, &ds), "dataset");
    fulmen_loader_options lo = fulmen_loader_options_default();
    fulmen_loader *loader = NULL;
    ok(fulmen_loader_new(ds, &lo, &loader), "loader");
    const char *cases[3][3] = {{"bf16-mixed", "1", "is not supported on the xla accelerator"},
                               {"16-mixed", "1", "is not supported on the xla accelerator"},
                               {"32-true", "[7]", "devices"}};
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        fulmen_trainer_options *opts = NULL;
        ok(fulmen_trainer_options_new(&opts), "options");
        ok(fulmen_trainer_options_set(opts, "accelerator", "xla"), "accelerator");
        ok(fulmen_trainer_options_set(opts, "precision", cases[i][0]), "precision");
        ok(fulmen_trainer_options_set(opts, "devices", cases[i][1]), "devices");
        ok(fulmen_trainer_options_set_bool(opts, "logger", false), "logger");
        fulmen_trainer *trainer = NULL;
        ok(fulmen_trainer_new(opts, &trainer), "trainer");
        fulmen_error *e = fulmen_trainer_fit(trainer, module, loader, NULL, NULL);
        const char *msg = e != NULL ? fulmen_error_message(e) : "(no error)";
        if (e == NULL || strstr(msg, cases[i][2]) == NULL) {
            fprintf(stderr, "test_xla: precision %s devices %s: %s\n", cases[i][0], cases[i][1], msg);
            bad++;
        }
        fulmen_error_free(e);
        fulmen_trainer_free(trainer);
        fulmen_trainer_options_free(opts);
    }
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_tensor_free(x);
    fulmen_lightning_module_free(module);
    fulmen_model_free(t.model);
    return bad == 0 ? 0 : 1;
}

/* XLA's own all-reduce (fulmen_distributed_xla_all_reduce: torch_xla's
 * kernel of c10d's functional all-reduce, through c10's dispatcher) with
 * `devices` XLA devices in this process, outside a distributed job (a
 * world of one). One device: every op runs in the device's graph (torch_xla
 * dumps the graphs it runs into XLA_SAVE_TENSORS_FILE, under `dir`, with
 * the device's ordinal appended: an all-reduce per call at least) and
 * leaves the values as they were (the reduction over one device); the
 * tensor stays on XLA, and synchronizing the device runs its graph. Two:
 * refused, since XLA would also wait for the device this process does not
 * run, and the tensor is untouched. A mean of integers is refused. */
static int scenario_reduce(const char *dir, const char *devices) {
    char graphs[4096], dumped[4200];
    snprintf(graphs, sizeof graphs, "%s/reduce-%s.hlo", dir, devices);
    snprintf(dumped, sizeof dumped, "%s.0", graphs);
    if (setenv("CPU_NUM_DEVICES", devices, 1) != 0 || setenv("XLA_SAVE_TENSORS_FILE", graphs, 1) != 0 ||
        setenv("XLA_SAVE_TENSORS_FMT", "hlo", 1) != 0)
        return 1;
    const float values[3] = {1.5f, -2.0f, 3.25f};
    const int64_t counts[2] = {3, 4};
    int64_t shape[1] = {3}, pair[1] = {2};
    fulmen_tensor *x = NULL, *y = NULL, *n = NULL, *nx = NULL;
    ok(fulmen_tensor_from_data(values, sizeof values, FULMEN_DTYPE_F32, shape, 1, &x), "data");
    ok(fulmen_tensor_to_device(x, FULMEN_DEVICE_TYPE_XLA, 0, &y), "to xla");
    int bad = 0;
    const char *ops[5] = {"sum", "mean", "max", "min", "product"};
    bool one = strcmp(devices, "1") == 0;
    for (int i = 0; i < (one ? 5 : 1); i++) {
        fulmen_error *e = fulmen_distributed_xla_all_reduce(y, ops[i]);
        const char *msg = e != NULL ? fulmen_error_message(e) : "(no error)";
        if (one ? e != NULL
                : e == NULL || fulmen_error_code(e) != FULMEN_CODE_UNSUPPORTED ||
                      strstr(msg, "this process has 2 XLA devices") == NULL) {
            fprintf(stderr, "test_xla: xla all_reduce %s on %s device(s): %s\n", ops[i], devices, msg);
            bad++;
        }
        fulmen_error_free(e);
    }
    fulmen_error *e = fulmen_distributed_xla_all_reduce(y, "median");
    if (e == NULL || fulmen_error_code(e) != FULMEN_CODE_INVALID_ARGUMENT) bad++;
    fulmen_error_free(e);
    ok(fulmen_tensor_from_data(counts, sizeof counts, FULMEN_DTYPE_I64, pair, 1, &n), "counts");
    ok(fulmen_tensor_to_device(n, FULMEN_DEVICE_TYPE_XLA, 0, &nx), "counts to xla");
    e = fulmen_distributed_xla_all_reduce(nx, "mean");
    if (e == NULL || fulmen_error_code(e) != FULMEN_CODE_INVALID_ARGUMENT) bad++;
    fulmen_error_free(e);
    int32_t type = -1;
    int64_t index = -1;
    float got[3] = {0};
    ok(fulmen_device_synchronize(FULMEN_DEVICE_TYPE_XLA, 0), "synchronize xla:0");
    ok(fulmen_tensor_device(y, &type, &index), "device");
    ok(fulmen_tensor_copy_to(y, FULMEN_DTYPE_F32, got, sizeof got), "read back");
    for (int i = 0; i < 3; i++) {
        if (got[i] != values[i]) {
            fprintf(stderr, "test_xla: element %d is %g after the all-reduce, not %g\n", i, got[i], values[i]);
            bad++;
        }
    }
    if (type != FULMEN_DEVICE_TYPE_XLA || index != 0) bad++;
    /* The graphs torch_xla ran: an all-reduce per op with one device, none
     * with two. */
    int reductions = 0;
    FILE *f = fopen(dumped, "r");
    if (f != NULL) {
        char line[4096];
        while (fgets(line, sizeof line, f) != NULL) reductions += strstr(line, " all-reduce(") != NULL;
        fclose(f);
    }
    if (one ? reductions < 5 : reductions != 0) {
        fprintf(stderr, "test_xla: %d all-reduce(s) in the graphs run with %s device(s)\n", reductions, devices);
        bad++;
    }
    fulmen_tensor_free(nx);
    fulmen_tensor_free(n);
    fulmen_tensor_free(y);
    fulmen_tensor_free(x);
    return bad == 0 ? 0 : 1;
}

/* Two ranks (fulmen's launcher), each with one XLA device: each is a PJRT
 * job of its own here, so XLA's all-reduce would not reach the other rank
 * and is refused on both, naming the counts. */
static int scenario_reduce_ranks(void) {
    if (setenv("CPU_NUM_DEVICES", "1", 1) != 0) return 1;
    fulmen_strategy *strategy = NULL;
    ok(fulmen_strategy_new("ddp", &strategy), "strategy");
    ok(fulmen_strategy_set(strategy, "timeout", "60"), "timeout");
    ok(fulmen_distributed_join(strategy, 2, false), "join");
    const float values[2] = {1.0f, 2.0f};
    int64_t shape[1] = {2};
    fulmen_tensor *x = NULL, *y = NULL;
    ok(fulmen_tensor_from_data(values, sizeof values, FULMEN_DTYPE_F32, shape, 1, &x), "data");
    ok(fulmen_tensor_to_device(x, FULMEN_DEVICE_TYPE_XLA, 0, &y), "to xla");
    fulmen_error *e = fulmen_distributed_xla_all_reduce(y, "sum");
    const char *msg = e != NULL ? fulmen_error_message(e) : "(no error)";
    int bad = e == NULL || fulmen_error_code(e) != FULMEN_CODE_UNSUPPORTED ||
              strstr(msg, "the PJRT job has 1 XLA device(s) and the distributed job 2 rank(s)") == NULL;
    if (bad) fprintf(stderr, "test_xla: xla all_reduce over 2 ranks of one device each: %s\n", msg);
    fulmen_error_free(e);
    fulmen_tensor_free(y);
    fulmen_tensor_free(x);
    fulmen_strategy_free(strategy);
    ok(fulmen_distributed_shutdown(60), "shutdown");
    return bad;
}

/* With `var` set to `value` (a broken installation), XLA is unavailable
 * with an error holding `needle`, twice (the first start's result is
 * kept), and the process lives on. */
static int scenario_broken(const char *var, const char *value, const char *needle) {
    if (setenv(var, value, 1) != 0) return 1;
    int bad = 0;
    for (int i = 0; i < 2; i++) {
        fulmen_tensor *x = NULL, *y = NULL;
        int64_t shape[1] = {3};
        ok(fulmen_tensor_zeros(shape, 1, FULMEN_DTYPE_F32, &x), "zeros");
        fulmen_error *e = fulmen_tensor_to_device(x, FULMEN_DEVICE_TYPE_XLA, 0, &y);
        const char *msg = e != NULL ? fulmen_error_message(e) : "(no error)";
        if (e == NULL || fulmen_error_code(e) != FULMEN_CODE_UNAVAILABLE || strstr(msg, needle) == NULL) {
            fprintf(stderr, "test_xla: %s=%s: %s\n", var, value, msg);
            bad++;
        }
        fulmen_error_free(e);
        fulmen_tensor_free(y);
        fulmen_tensor_free(x);
    }
    return bad == 0 ? 0 : 1;
}

static int scenario_fit(const char *dir, const char *name, const char *accelerator, const char *devices,
                        const char *strategy, long batch, long epochs, const char *resume) {
    const char *data = getenv("FULMEN_MNIST");
    if (data == NULL) {
        fprintf(stderr, "test_xla: FULMEN_MNIST is not set\n");
        return 1;
    }
    fulmen_csv_options csv = fulmen_csv_options_default();
    csv.label_column = -1;
    csv.header = 0;
    csv.scaling = FULMEN_SCALING_DIVIDE;
    csv.scale_divisor = 255.0;
    fulmen_dataset *ds = NULL;
    ok(fulmen_dataset_from_csv(data, &csv, &ds), "csv");
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = (size_t)batch;
    lo.shuffle = false;
    fulmen_loader *loader = NULL;
    ok(fulmen_loader_new(ds, &lo, &loader), "loader");

    bool on_xla = strcmp(accelerator, "xla") == 0;
    task t = {mlp(), on_xla ? FULMEN_DEVICE_TYPE_XLA : FULMEN_DEVICE_TYPE_CPU, {0}, 0};
    fulmen_lightning_module *module = module_for(&t);

    char root[4096];
    snprintf(root, sizeof root, "%s/%s", dir, name);
    fulmen_trainer_options *opts = NULL;
    ok(fulmen_trainer_options_new(&opts), "options");
    ok(fulmen_trainer_options_set(opts, "default_root_dir", root), "root");
    ok(fulmen_trainer_options_set(opts, "accelerator", accelerator), "accelerator");
    ok(fulmen_trainer_options_set(opts, "devices", devices), "devices");
    ok(fulmen_trainer_options_set(opts, "strategy", strategy), "strategy");
    ok(fulmen_trainer_options_set_int(opts, "max_epochs", epochs), "max_epochs");
    ok(fulmen_trainer_options_set_int(opts, "limit_train_batches", LIMIT_BATCHES), "limit");
    ok(fulmen_trainer_options_set_bool(opts, "enable_progress_bar", false), "progress");
    ok(fulmen_trainer_options_set_bool(opts, "enable_model_summary", false), "summary");
    ok(fulmen_trainer_options_set_bool(opts, "logger", false), "logger");
    fulmen_trainer *trainer = NULL;
    ok(fulmen_trainer_new(opts, &trainer), "trainer");
    ok(fulmen_trainer_fit(trainer, module, loader, NULL, resume), "fit");

    size_t rank = 0, world = 1;
    ok(fulmen_distributed_ranks(&rank, NULL, &world), "ranks");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-rank%zu.losses", dir, name, rank);
    FILE *f = fopen(path, "w");
    if (f == NULL) return 1;
    for (size_t i = 0; i < t.steps; i++) fprintf(f, "%.9g\n", t.losses[i]);
    fclose(f);
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
        ok(fulmen_model_save(t.model, path), "save");
    }
    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_model_free(t.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    if (world > 1) ok(fulmen_distributed_shutdown(60), "shutdown");
    return 0;
}

/* ---------------------------------------------------------- orchestrator */

static const char *self_path;

/* Runs `scenario` (with up to 3 arguments, NULL-ended) as a child; its
 * exit status. */
static int run_plain(const char *scenario, const char *a, const char *b, const char *c) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self_path, self_path, scenario, a, b, c, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    EXPECT(code == 0, "scenario %s exited with %d", scenario, code);
    return code;
}

static int run(const char *dir, const char *name, const char *acc, const char *devices, const char *strategy,
               const char *batch, const char *epochs, const char *resume) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self_path, self_path, "fit", dir, name, acc, devices, strategy, batch, epochs, resume, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    EXPECT(code == 0, "scenario %s exited with %d", name, code);
    return code;
}

static size_t read_losses(const char *dir, const char *name, int rank, double *out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-rank%d.losses", dir, name, rank);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    size_t n = 0;
    while (n < MAX_STEPS && fscanf(f, "%lf", &out[n]) == 1) n++;
    fclose(f);
    return n;
}

/* Per-step losses of `b` equal `a`'s (from step `from` of `a`) within 1e-5
 * relative. `b`'s loss of a step is the mean over its `ranks` ranks and,
 * under dp, over the `chunks` chunks each step's batch is split into
 * (equal chunks of a mean loss average to the whole batch's). */
static void same_losses(const char *dir, const char *a, const char *b, size_t from, int ranks, size_t chunks) {
    static double x[MAX_STEPS], y[4][MAX_STEPS];
    size_t n = read_losses(dir, a, 0, x), m = 0;
    for (int r = 0; r < ranks; r++) {
        size_t got = read_losses(dir, b, r, y[r]);
        EXPECT(r == 0 || got == m, "%s: rank %d has %zu losses, rank 0 %zu", b, r, got, m);
        if (r == 0) m = got;
    }
    m /= chunks;
    EXPECT(m > 0 && n == from + m, "%s has %zu steps, %s %zu (from %zu)", a, n, b, m, from);
    for (size_t i = 0; i < m && from + i < n; i++) {
        double sum = 0;
        for (int r = 0; r < ranks; r++)
            for (size_t c = 0; c < chunks; c++) sum += y[r][i * chunks + c];
        double mean = sum / (double)((size_t)ranks * chunks);
        double rel = fabs(x[from + i] - mean) / fmax(fabs(x[from + i]), 1e-12);
        EXPECT(rel <= 1e-5, "step %zu: %s %.9g, %s %.9g", from + i, a, x[from + i], b, mean);
    }
    printf("losses of %s equal %s's over %zu steps\n", b, a, m);
}

/* The weights in two safetensors files agree within `tol`. */
static void same_weights(const char *dir, const char *a, const char *b, double tol) {
    char pa[4096], pb[4096];
    snprintf(pa, sizeof pa, "%s/%s.safetensors", dir, a);
    snprintf(pb, sizeof pb, "%s/%s.safetensors", dir, b);
    fulmen_model *ma = mlp(), *mb = mlp();
    ok(fulmen_model_load(ma, pa, true), "load a");
    ok(fulmen_model_load(mb, pb, true), "load b");
    size_t n = 0;
    ok(fulmen_model_state_dict_len(ma, &n), "state len");
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        fulmen_tensor *ta = NULL, *tb = NULL, *d = NULL, *ad = NULL, *mx = NULL;
        char key[256];
        size_t len = 0;
        ok(fulmen_model_state_dict_name(ma, i, key, sizeof key, &len), "entry name");
        ok(fulmen_model_state_dict_get(ma, key, &ta), "entry a");
        ok(fulmen_model_state_dict_get(mb, key, &tb), "entry b");
        ok(fulmen_tensor_sub(ta, tb, &d), "sub");
        ok(fulmen_tensor_abs(d, &ad), "abs");
        ok(fulmen_tensor_max(ad, &mx), "max");
        double v = 0;
        ok(fulmen_tensor_item(mx, &v), "item");
        worst = fmax(worst, v);
        fulmen_tensor_free(ta);
        fulmen_tensor_free(tb);
        fulmen_tensor_free(d);
        fulmen_tensor_free(ad);
        fulmen_tensor_free(mx);
    }
    EXPECT(worst <= tol, "weights of %s and %s differ by %g (tolerance %g)", a, b, worst, tol);
    printf("weights of %s equal %s's (largest difference %.3g)\n", b, a, worst);
    fulmen_model_free(ma);
    fulmen_model_free(mb);
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc >= 9 && strcmp(argv[1], "fit") == 0) {
        return scenario_fit(argv[2], argv[3], argv[4], argv[5], argv[6], atol(argv[7]), atol(argv[8]),
                            argc > 9 ? argv[9] : NULL);
    }
    if (argc == 2 && strcmp(argv[1], "refusals") == 0) return scenario_refusals();
    if (argc == 4 && strcmp(argv[1], "reduce") == 0) return scenario_reduce(argv[2], argv[3]);
    if (argc == 2 && strcmp(argv[1], "reduce_ranks") == 0) return scenario_reduce_ranks();
    if (argc == 5 && strcmp(argv[1], "broken") == 0) return scenario_broken(argv[2], argv[3], argv[4]);
    if (getenv("PJRT_DEVICE") == NULL) {
        fprintf(stderr, "test_xla: set PJRT_DEVICE=CPU (and CPU_NUM_DEVICES=2)\n");
        return 1;
    }
    char dir[] = "/tmp/fulmen-xla-XXXXXX";
    if (mkdtemp(dir) == NULL) return 1;
    char path[4096];

    /* One device: xla:0 against the CPU, 2 epochs. */
    run(dir, "cpu", "cpu", "1", "auto", "32", "2", NULL);
    run(dir, "xla", "xla", "1", "single_xla", "32", "2", NULL);
    same_losses(dir, "cpu", "xla", 0, 1, 1);
    same_weights(dir, "cpu", "xla", 1e-5);

    /* A checkpoint written on xla:0 resumes on the CPU, and back. */
    run(dir, "xla_first", "xla", "1", "auto", "32", "1", NULL);
    snprintf(path, sizeof path, "%s/xla_first/checkpoints/last.ckpt", dir);
    if (access(path, R_OK) != 0) snprintf(path, sizeof path, "%s/xla_first/checkpoints/epoch=0-step=%d.ckpt", dir, LIMIT_BATCHES);
    run(dir, "cpu_second", "cpu", "1", "auto", "32", "2", path);
    same_losses(dir, "cpu", "cpu_second", LIMIT_BATCHES, 1, 1);
    same_weights(dir, "cpu", "cpu_second", 1e-5);
    run(dir, "cpu_first", "cpu", "1", "auto", "32", "1", NULL);
    snprintf(path, sizeof path, "%s/cpu_first/checkpoints/epoch=0-step=%d.ckpt", dir, LIMIT_BATCHES);
    run(dir, "xla_second", "xla", "1", "auto", "32", "2", path);
    same_losses(dir, "cpu", "xla_second", LIMIT_BATCHES, 1, 1);
    same_weights(dir, "cpu", "xla_second", 1e-5);

    /* DataParallel over xla:0 and xla:1 in one process. */
    run(dir, "xla_dp", "xla", "2", "dp", "32", "2", NULL);
    same_losses(dir, "cpu", "xla_dp", 0, 1, 2);
    same_weights(dir, "cpu", "xla_dp", 1e-5);

    /* The xla strategy: 2 processes with 16 samples each reach one
     * process's weights with 32 (its rank 0 is this scenario's process). */
    run(dir, "xla_ranks", "xla", "2", "xla", "16", "2", NULL);
    same_losses(dir, "cpu", "xla_ranks", 0, 2, 1);

    if (run_plain("refusals", NULL, NULL, NULL) == 0) printf("mixed precisions and a missing device refused on xla\n");
    if (run_plain("reduce", dir, "1", NULL) == 0 && run_plain("reduce", dir, "2", NULL) == 0 &&
        run_plain("reduce_ranks", NULL, NULL, NULL) == 0)
        printf("XLA's all-reduce runs in the graph on one device; refused with two devices in a process, and over "
               "ranks that are PJRT jobs of their own\n");

    /* A broken installation: a clear error, not a crash. */
    if (run_plain("broken", "PYTHONHOME", "/nonexistent", "standard library is not under /nonexistent") == 0 &&
        run_plain("broken", "FULMEN_XLA_LIBPYTHON", "/nonexistent/libpython3.11.so.1.0", "cannot load") == 0 &&
        run_plain("broken", "FULMEN_XLA_LIB_DIR", "/nonexistent", "_XLAC extension is not in /nonexistent") == 0 &&
        run_plain("broken", "PJRT_DEVICE", "", "PJRT_DEVICE is not set") == 0)
        printf("a missing standard library, libpython, _XLAC or PJRT_DEVICE: clear errors\n");
    same_weights(dir, "cpu", "xla_ranks", 1e-5);

    if (failed == 0) {
        snprintf(path, sizeof path, "rm -rf %s", dir);
        if (system(path) != 0) failed++;
    } else {
        fprintf(stderr, "test_xla: outputs kept in %s\n", dir);
    }
    printf("test_xla: %s\n", failed == 0 ? "all passed" : "FAILED");
    return failed == 0 ? 0 : 1;
}
