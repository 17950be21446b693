/*
 * A small GAN on MNIST-5k with manual optimization: a generator (noise 64
 * -> 256 -> 784, tanh) and a discriminator (784 -> 256 -> 1 logit) trained
 * alternately by their own Adam optimizers inside training_step, as in
 * Lightning's GAN example (automatic_optimization = False,
 * toggle_optimizer, manual_backward, opt.step / zero_grad).
 *
 *   gan --data mnist_5k.csv.gz [--epochs 20] [--batch-size 64] [--lr 2e-4]
 *       [--seed 42] [--threads N] [--limit-batches N] [--out runs/gan]
 *       [--init-out FILE] [--loss-log FILE] [--no-shuffle]
 *
 * Prints both losses per epoch (and how often the discriminator tells real
 * from generated digits); writes CSV / TensorBoard logs under
 * <out>/lightning_logs/, the weights to <out>/gan.safetensors and 64
 * generated digits to <out>/samples.pgm (an 8x8 grid, any image viewer).
 * --init-out saves the initial weights and --loss-log writes each batch's
 * generator then discriminator loss, so a PyTorch twin (Lightning's own
 * Trainer, tests/interop/gan_twin.py) can replay the run. The noise is
 * drawn from libtorch's generator, seeded with --seed when fit starts.
 */
#include <fulmen.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NOISE 64
#define HIDDEN 256
#define PIXELS 784

enum { OPT_G = 0, OPT_D = 1 }; /* optimizer indices, in configure_optimizers order */

/* Prints the error, frees it and exits. */
static void check(fulmen_error *err, const char *what) {
    if (err != NULL) {
        fprintf(stderr, "gan: %s: %s (code %d)\n", what, fulmen_error_message(err), fulmen_error_code(err));
        fulmen_error_free(err);
        exit(1);
    }
}

/* What the callbacks need. */
typedef struct {
    fulmen_model *model; /* children "generator" and "discriminator" */
    double lr;
    FILE *loss_log;
} task;

/* `n` noise rows from libtorch's generator. */
static fulmen_error *noise(int64_t n, fulmen_tensor **out) {
    int64_t shape[2] = {n, NOISE};
    return fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, out);
}

/* A [n, 1] tensor of `value` (the "real" or "fake" label). */
static fulmen_error *labels(int64_t n, double value, fulmen_tensor **out) {
    int64_t shape[2] = {n, 1};
    return fulmen_tensor_full(shape, 2, value, FULMEN_DTYPE_F32, out);
}

/* The fraction of logits on the right side of 0 (> 0 means "real"), as a
 * one-element tensor. */
static fulmen_error *fraction_right(const fulmen_tensor *logits, int real, fulmen_tensor **out) {
    fulmen_tensor *hit = NULL, *hitf = NULL;
    fulmen_error *err = fulmen_tensor_compare_scalar(logits, 0.0, real ? FULMEN_COMPARE_GT : FULMEN_COMPARE_LE, &hit);
    if (err == NULL) err = fulmen_tensor_to_dtype(hit, FULMEN_DTYPE_F32, &hitf);
    if (err == NULL) err = fulmen_tensor_mean(hitf, out);
    return err;
}

/* One batch: the generator's step, then the discriminator's, each with
 * only its own parameters requiring grad (toggle_optimizer). */
static fulmen_error *training_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **out) {
    (void)out; /* manual optimization: nothing to return */
    task *t = userdata;
    fulmen_tensor *pixels = NULL, *scaled = NULL, *real = NULL, *z = NULL, *fake = NULL, *fake_det = NULL;
    fulmen_tensor *ones = NULL, *zeros = NULL, *judged = NULL, *g_loss = NULL;
    fulmen_tensor *on_real = NULL, *on_fake = NULL, *real_loss = NULL, *fake_loss = NULL, *sum = NULL, *d_loss = NULL;
    fulmen_tensor *real_right = NULL, *fake_right = NULL;
    size_t n_rows = 0;
    int64_t shape[2] = {0, 0};
    size_t ndim = 0;
    fulmen_error *err = fulmen_batch_get(batch, 0, &pixels);
    if (err == NULL) err = fulmen_tensor_shape(pixels, shape, 2, &ndim);
    n_rows = (size_t)shape[0];
    /* pixels in [0, 1] -> [-1, 1], the generator's tanh range */
    if (err == NULL) err = fulmen_tensor_mul_scalar(pixels, 2.0, &scaled);
    if (err == NULL) err = fulmen_tensor_add_scalar(scaled, -1.0, &real);
    if (err == NULL) err = noise((int64_t)n_rows, &z);
    if (err == NULL) err = labels((int64_t)n_rows, 1.0, &ones);
    if (err == NULL) err = labels((int64_t)n_rows, 0.0, &zeros);

    /* Generator: make the discriminator call its digits real. */
    if (err == NULL) err = fulmen_step_context_toggle_optimizer(ctx, OPT_G);
    if (err == NULL) err = fulmen_model_forward_child(t->model, "generator", z, &fake);
    if (err == NULL) err = fulmen_model_forward_child(t->model, "discriminator", fake, &judged);
    if (err == NULL) err = fulmen_loss_bce_with_logits(judged, ones, FULMEN_REDUCTION_MEAN, &g_loss);
    if (err == NULL) err = fulmen_step_context_manual_backward(ctx, g_loss);
    if (err == NULL) err = fulmen_step_context_optimizer_step(ctx, OPT_G, NULL);
    if (err == NULL) err = fulmen_step_context_optimizer_zero_grad(ctx, OPT_G);
    if (err == NULL) err = fulmen_step_context_untoggle_optimizer(ctx, OPT_G);

    /* Discriminator: real digits are real, generated ones fake. */
    if (err == NULL) err = fulmen_step_context_toggle_optimizer(ctx, OPT_D);
    if (err == NULL) err = fulmen_model_forward_child(t->model, "discriminator", real, &on_real);
    if (err == NULL) err = fulmen_loss_bce_with_logits(on_real, ones, FULMEN_REDUCTION_MEAN, &real_loss);
    if (err == NULL) err = fulmen_tensor_detach(fake, &fake_det);
    if (err == NULL) err = fulmen_model_forward_child(t->model, "discriminator", fake_det, &on_fake);
    if (err == NULL) err = fulmen_loss_bce_with_logits(on_fake, zeros, FULMEN_REDUCTION_MEAN, &fake_loss);
    if (err == NULL) err = fulmen_tensor_add(real_loss, fake_loss, &sum);
    if (err == NULL) err = fulmen_tensor_mul_scalar(sum, 0.5, &d_loss);
    if (err == NULL) err = fulmen_step_context_manual_backward(ctx, d_loss);
    if (err == NULL) err = fulmen_step_context_optimizer_step(ctx, OPT_D, NULL);
    if (err == NULL) err = fulmen_step_context_optimizer_zero_grad(ctx, OPT_D);
    if (err == NULL) err = fulmen_step_context_untoggle_optimizer(ctx, OPT_D);

    /* Logged as tensors, not numbers read from them: a read would make
     * every step wait for a GPU. */
    const uint32_t losses = FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH | FULMEN_LOG_PROG_BAR;
    if (err == NULL) err = fraction_right(on_real, 1, &real_right);
    if (err == NULL) err = fraction_right(on_fake, 0, &fake_right);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, "g_loss", g_loss, losses, 0);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, "d_loss", d_loss, losses, 0);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, "d_acc_real", real_right, FULMEN_LOG_ON_EPOCH, 0);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, "d_acc_fake", fake_right, FULMEN_LOG_ON_EPOCH, 0);
    if (err == NULL && t->loss_log != NULL) {
        /* --loss-log asks for every step's losses: read at each step. */
        double g = 0, d = 0;
        err = fulmen_tensor_item(g_loss, &g);
        if (err == NULL) err = fulmen_tensor_item(d_loss, &d);
        if (err == NULL) fprintf(t->loss_log, "%.9g\n%.9g\n", g, d);
    }
    return err; /* tensors made here are released when the step returns */
}

/* Prints the epoch's mean losses and the discriminator's accuracy. */
static fulmen_error *on_hook(void *userdata, int32_t hook, fulmen_hook_context *ctx) {
    (void)userdata;
    if (hook != FULMEN_HOOK_TRAIN_EPOCH_END) return NULL;
    int64_t epoch = 0;
    double g = 0, d = 0, real = 0, fake = 0;
    fulmen_error *err = fulmen_hook_context_epoch(ctx, &epoch);
    if (err == NULL) err = fulmen_hook_context_metric(ctx, "g_loss_epoch", &g);
    if (err == NULL) err = fulmen_hook_context_metric(ctx, "d_loss_epoch", &d);
    if (err == NULL) err = fulmen_hook_context_metric(ctx, "d_acc_real", &real);
    if (err == NULL) err = fulmen_hook_context_metric(ctx, "d_acc_fake", &fake);
    if (err == NULL) {
        printf("epoch %lld: generator loss %.4f, discriminator loss %.4f; the discriminator tells %.1f%% of real and "
               "%.1f%% of generated digits\n",
               (long long)epoch, g, d, 100.0 * real, 100.0 * fake);
        fflush(stdout);
    }
    return err;
}

/* Names of the state_dict entries under `prefix`, as parameter handles. */
static fulmen_error *params_of(const fulmen_model *model, const char *prefix, fulmen_tensor **params, size_t capacity,
                               size_t *count) {
    size_t n = 0;
    *count = 0;
    fulmen_error *err = fulmen_model_state_dict_len(model, &n);
    for (size_t i = 0; err == NULL && i < n; i++) {
        char name[256];
        size_t len = 0;
        err = fulmen_model_state_dict_name(model, i, name, sizeof name, &len);
        if (err == NULL && strncmp(name, prefix, strlen(prefix)) == 0) {
            if (*count == capacity) return NULL;
            err = fulmen_model_state_dict_get(model, name, &params[*count]);
            if (err == NULL) (*count)++;
        }
    }
    return err;
}

/* One Adam (betas 0.5, 0.999, as GANs use) over the child `prefix`. */
static fulmen_error *add_adam(task *t, fulmen_optimizer_config *config, const char *prefix) {
    fulmen_tensor *params[8] = {NULL};
    size_t n = 0;
    fulmen_optimizer *opt = NULL;
    fulmen_adam_options o = fulmen_adam_options_default();
    o.lr = t->lr;
    o.beta1 = 0.5;
    fulmen_error *err = params_of(t->model, prefix, params, 8, &n);
    if (err == NULL) err = fulmen_optimizer_adam_new(NULL, (const fulmen_tensor *const *)params, n, &o, &opt);
    if (err == NULL) {
        err = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
        if (err != NULL) fulmen_optimizer_free(opt);
    }
    return err; /* the parameter handles go with the callback's scope */
}

static fulmen_error *configure_optimizers(void *userdata, fulmen_optimizer_config *config) {
    fulmen_error *err = add_adam(userdata, config, "generator.");
    if (err == NULL) err = add_adam(userdata, config, "discriminator.");
    return err;
}

/* A sequential in -> 256 -> LeakyReLU(0.2) -> out [-> last activation]. */
static fulmen_model *mlp(int64_t in, int64_t out, int32_t last) {
    fulmen_model *m = NULL, *l = NULL;
    check(fulmen_model_sequential_new(&m), "creating a network");
    check(fulmen_model_linear_new(in, HIDDEN, true, &l), "linear");
    check(fulmen_model_push(m, l), "push");
    check(fulmen_model_activation_new(FULMEN_ACTIVATION_LEAKY_RELU, 0.2, &l), "leaky relu");
    check(fulmen_model_push(m, l), "push");
    check(fulmen_model_linear_new(HIDDEN, out, true, &l), "linear");
    check(fulmen_model_push(m, l), "push");
    if (last >= 0) {
        check(fulmen_model_activation_new(last, 0, &l), "activation");
        check(fulmen_model_push(m, l), "push");
    }
    return m;
}

/* Writes 64 generated digits as an 8x8 grid to a binary PGM file. */
static void write_samples(fulmen_model *model, const char *path) {
    fulmen_tensor *z = NULL, *images = NULL;
    float *pixels = malloc(64 * PIXELS * sizeof *pixels);
    unsigned char *grid = malloc(224 * 224);
    if (pixels == NULL || grid == NULL) exit(1);
    check(fulmen_model_set_training(model, false), "eval mode");
    check(noise(64, &z), "noise");
    check(fulmen_model_forward_child(model, "generator", z, &images), "generating");
    check(fulmen_tensor_copy_to(images, FULMEN_DTYPE_F32, pixels, 64 * PIXELS * sizeof *pixels), "reading images");
    for (int k = 0; k < 64; k++)
        for (int r = 0; r < 28; r++)
            for (int c = 0; c < 28; c++) {
                float v = (pixels[k * PIXELS + r * 28 + c] + 1.0f) * 127.5f;
                grid[((k / 8) * 28 + r) * 224 + (k % 8) * 28 + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    FILE *f = fopen(path, "wb");
    if (f == NULL || fprintf(f, "P5\n224 224\n255\n") < 0 || fwrite(grid, 1, 224 * 224, f) != 224 * 224 || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    fulmen_tensor_free(z);
    fulmen_tensor_free(images);
    free(pixels);
    free(grid);
}

int main(int argc, char **argv) {
    const char *data = NULL, *out = "runs/gan", *init_out = NULL, *loss_log = NULL;
    long epochs = 20, batch_size = 64, seed = 42, threads = 0, limit = -1;
    double lr = 2e-4;
    int shuffle = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-shuffle") == 0) { shuffle = 0; continue; }
        if (v == NULL) { fprintf(stderr, "gan: %s needs a value\n", a); return 2; }
        if (strcmp(a, "--data") == 0) data = v;
        else if (strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--epochs") == 0) epochs = atol(v);
        else if (strcmp(a, "--batch-size") == 0) batch_size = atol(v);
        else if (strcmp(a, "--lr") == 0) lr = atof(v);
        else if (strcmp(a, "--seed") == 0) seed = atol(v);
        else if (strcmp(a, "--threads") == 0) threads = atol(v);
        else if (strcmp(a, "--limit-batches") == 0) limit = atol(v);
        else if (strcmp(a, "--init-out") == 0) init_out = v;
        else if (strcmp(a, "--loss-log") == 0) loss_log = v;
        else { fprintf(stderr, "gan: unknown option %s\n", a); return 2; }
        i++;
    }
    if (data == NULL || epochs < 1 || batch_size < 1) {
        fprintf(stderr, "usage: gan --data mnist_5k.csv.gz [--epochs N] [--batch-size N] [--lr X] [--seed N] [--threads N] [--limit-batches N] [--out DIR] [--init-out FILE] [--loss-log FILE] [--no-shuffle]\n");
        return 2;
    }
    if (threads > 0) check(fulmen_set_num_threads((int32_t)threads), "setting threads");
    check(fulmen_manual_seed((uint64_t)seed), "seeding");

    /* MNIST-5k: 784 pixels (0..255) then the label; pixels scaled to [0, 1]. */
    fulmen_csv_options csv = fulmen_csv_options_default();
    csv.label_column = -1;
    csv.header = 0;
    csv.scaling = FULMEN_SCALING_DIVIDE;
    csv.scale_divisor = 255.0;
    fulmen_dataset *digits = NULL;
    check(fulmen_dataset_from_csv(data, &csv, &digits), "loading the CSV");
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = (size_t)batch_size;
    lo.shuffle = shuffle; /* the file is sorted by digit */
    lo.seed = (uint64_t)seed;
    fulmen_loader *loader = NULL;
    check(fulmen_loader_new(digits, &lo, &loader), "loader");

    task t = {NULL, lr, NULL};
    fulmen_model *gen = mlp(NOISE, PIXELS, FULMEN_ACTIVATION_TANH), *disc = mlp(PIXELS, 1, -1);
    check(fulmen_model_named_new(&t.model), "creating the GAN");
    check(fulmen_model_add(t.model, "generator", gen), "adding the generator");
    check(fulmen_model_add(t.model, "discriminator", disc), "adding the discriminator");
    if (init_out != NULL) check(fulmen_model_save(t.model, init_out), "saving the initial weights");
    if (loss_log != NULL && (t.loss_log = fopen(loss_log, "w")) == NULL) { perror(loss_log); return 1; }

    fulmen_module_vtable vt = {0};
    vt.struct_size = sizeof vt;
    vt.userdata = &t;
    vt.training_step = training_step;
    vt.configure_optimizers = configure_optimizers;
    vt.on_hook = on_hook;
    fulmen_lightning_module *module = NULL;
    check(fulmen_lightning_module_new(&vt, t.model, &module), "creating the module");
    check(fulmen_lightning_module_set_automatic_optimization(module, false), "manual optimization");

    mkdir(out, 0755);
    fulmen_trainer_options *opts = NULL;
    check(fulmen_trainer_options_new(&opts), "options");
    check(fulmen_trainer_options_set_int(opts, "max_epochs", epochs), "max_epochs");
    check(fulmen_trainer_options_set(opts, "default_root_dir", out), "default_root_dir");
    check(fulmen_trainer_options_set_int(opts, "log_every_n_steps", 10), "log_every_n_steps");
    check(fulmen_trainer_options_set(opts, "enable_progress_bar", "false"), "progress bar");
    if (limit > 0) check(fulmen_trainer_options_set_int(opts, "limit_train_batches", limit), "limit_train_batches");
    fulmen_trainer *trainer = NULL;
    check(fulmen_trainer_new(opts, &trainer), "creating the trainer");
    check(fulmen_manual_seed((uint64_t)seed), "seeding the noise");
    check(fulmen_trainer_fit(trainer, module, loader, NULL, NULL), "training");
    if (t.loss_log != NULL) fclose(t.loss_log);

    int64_t steps = 0;
    check(fulmen_trainer_global_step(trainer, &steps), "global step");
    char weights[4096], samples[4096];
    snprintf(weights, sizeof weights, "%s/gan.safetensors", out);
    snprintf(samples, sizeof samples, "%s/samples.pgm", out);
    check(fulmen_model_save(t.model, weights), "saving the weights");
    write_samples(t.model, samples);
    printf("%lld optimizer steps (generator and discriminator alternating)\nweights: %s\nsamples: %s\n",
           (long long)steps, weights, samples);

    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_model_free(t.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(digits);
    return 0;
}
