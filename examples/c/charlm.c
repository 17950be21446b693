/*
 * A GPT-style character language model trained with fulmen's C API on the
 * Lee corpus (300 news stories, 360 kB, from the gensim package): token and
 * position embeddings, pre-norm transformer blocks with causal
 * self-attention, a final layer norm and a linear head over the bytes that
 * occur in the text. The first 90% trains, the rest validates.
 *
 *   charlm --data lee_background.txt [--epochs 3] [--batch-size 32]
 *          [--context 64] [--d-model 64] [--heads 4] [--layers 2]
 *          [--dropout 0.1] [--lr 3e-3] [--seed 42] [--threads N]
 *          [--limit-batches N] [--val-batches N] [--no-shuffle] [--sample 300]
 *          [--out runs/charlm]
 *          [--init-out FILE] [--loss-log FILE]
 *
 * Prints the validation loss in bits per character after every epoch and
 * samples text at the end (--limit-batches trains on the first N batches
 * of each epoch, --val-batches validates on the first N, 0 for none); writes CSV and TensorBoard logs and checkpoints
 * under <out> and the weights to <out>/model.safetensors. --init-out saves
 * the initial weights and --loss-log writes every training step's loss, so
 * a PyTorch twin (tests/interop/charlm_twin.py) can replay the same run.
 */
#include <fulmen.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The largest corpus read (bytes); a larger file is refused. */
#define MAX_TEXT (64u << 20)

static void check(fulmen_error *err, const char *what) {
    if (err != NULL) {
        fprintf(stderr, "charlm: %s: %s (code %d)\n", what, fulmen_error_message(err), fulmen_error_code(err));
        fulmen_error_free(err);
        exit(1);
    }
}

/* The model's shape and what the step callbacks need. */
typedef struct {
    fulmen_model *model;
    int64_t context, layers, vocab;
    double lr;
    fulmen_tensor *mask;      /* bool [context, context], true above the diagonal */
    fulmen_tensor *positions; /* int64 0..context-1 */
    FILE *loss_log;
} task;

/* A bool [n, n] mask with true where a query would see a later key. */
static fulmen_error *causal_mask(int64_t n, fulmen_tensor **out) {
    fulmen_tensor *ones = NULL;
    const int64_t shape[2] = {n, n};
    fulmen_error *err = fulmen_tensor_ones(shape, 2, FULMEN_DTYPE_BOOL, &ones);
    if (err == NULL) err = fulmen_tensor_triu(ones, 1, out);
    fulmen_tensor_free(ones);
    return err;
}

/* Logits [B, L, vocab] of ids [B, L] (L <= context), with `mask` [L, L]
 * and `positions` 0..L-1. The caller frees *out and nothing else. */
static fulmen_error *logits_of(const task *t, const fulmen_tensor *ids, const fulmen_tensor *mask,
                               const fulmen_tensor *positions, fulmen_tensor **out) {
    fulmen_tensor *tok = NULL, *pos = NULL, *h = NULL, *normed = NULL;
    fulmen_error *err = fulmen_model_forward_child(t->model, "tok", ids, &tok);
    if (err == NULL) err = fulmen_model_forward_child(t->model, "pos", positions, &pos);
    if (err == NULL) err = fulmen_tensor_add(tok, pos, &h);
    for (int64_t i = 0; err == NULL && i < t->layers; i++) {
        char path[32];
        snprintf(path, sizeof path, "blocks.%lld", (long long)i);
        const fulmen_tensor *in[2] = {h, mask};
        fulmen_tensor *next = NULL;
        size_t count = 0;
        err = fulmen_model_forward_multi(t->model, path, in, 2, &next, 1, &count);
        fulmen_tensor_free(h);
        h = next;
    }
    if (err == NULL) err = fulmen_model_forward_child(t->model, "ln", h, &normed);
    if (err == NULL) err = fulmen_model_forward_child(t->model, "head", normed, out);
    fulmen_tensor_free(tok);
    fulmen_tensor_free(pos);
    fulmen_tensor_free(h);
    fulmen_tensor_free(normed);
    return err;
}

/* Mean cross-entropy (nats per character) of batch = [x, y], both [B, T]. */
static fulmen_error *batch_loss(const task *t, const fulmen_batch *batch, fulmen_tensor **loss) {
    fulmen_tensor *x = NULL, *y = NULL, *logits = NULL, *flat = NULL, *targets = NULL;
    const int64_t rows[2] = {-1, t->vocab}, all[1] = {-1};
    fulmen_error *err = fulmen_batch_get(batch, 0, &x);
    if (err == NULL) err = fulmen_batch_get(batch, 1, &y);
    if (err == NULL) err = logits_of(t, x, t->mask, t->positions, &logits);
    if (err == NULL) err = fulmen_tensor_reshape(logits, rows, 2, &flat);
    if (err == NULL) err = fulmen_tensor_reshape(y, all, 1, &targets);
    if (err == NULL) err = fulmen_loss_cross_entropy(flat, targets, FULMEN_REDUCTION_MEAN, loss);
    return err; /* tensors made in a step are released when it returns */
}

/* The steps log tensors, not numbers read from them: on a GPU a read
 * (fulmen_tensor_item) would make every step wait for the device, while
 * a logged tensor is read only where the trainer reads values anyway. */
static fulmen_error *training_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss_out) {
    task *t = userdata;
    fulmen_error *err = batch_loss(t, batch, loss_out);
    if (err == NULL && t->loss_log != NULL) {
        /* --loss-log asks for every step's loss: read at each step. */
        double value = 0;
        err = fulmen_tensor_item(*loss_out, &value);
        if (err == NULL) fprintf(t->loss_log, "%.9g\n", value);
    }
    if (err == NULL)
        err = fulmen_step_context_log_tensor(ctx, "train_loss", *loss_out, FULMEN_LOG_ON_STEP | FULMEN_LOG_ON_EPOCH, 0);
    return err;
}

static fulmen_error *validation_step(void *userdata, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL, *bits = NULL;
    fulmen_error *err = batch_loss(userdata, batch, &loss);
    if (err == NULL) err = fulmen_tensor_mul_scalar(loss, 1.0 / log(2.0), &bits);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, "val_loss", loss, FULMEN_LOG_ON_EPOCH, 0);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, "val_bpc", bits, FULMEN_LOG_ON_EPOCH | FULMEN_LOG_PROG_BAR, 0);
    return err;
}

static fulmen_error *configure_optimizers(void *userdata, fulmen_optimizer_config *config) {
    task *t = userdata;
    fulmen_adam_options opts = fulmen_adamw_options_default();
    opts.lr = t->lr;
    fulmen_optimizer *adamw = NULL;
    fulmen_error *err = fulmen_optimizer_adamw_new(t->model, NULL, 0, &opts, &adamw);
    if (err != NULL) return err;
    err = fulmen_optimizer_config_add(config, adamw, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (err != NULL) fulmen_optimizer_free(adamw);
    return err;
}

/* Adds *layer (just made by `made`; consumed) to `parent` under `name`. */
static void add(fulmen_model *parent, const char *name, fulmen_error *made, fulmen_model **layer) {
    check(made, name);
    check(fulmen_model_add(parent, name, *layer), name);
    *layer = NULL;
}

static fulmen_model *build_model(int64_t vocab, int64_t context, int64_t d_model, int64_t heads, int64_t layers,
                                 double dropout) {
    fulmen_model *m = NULL, *l = NULL, *blocks = NULL;
    check(fulmen_model_named_new(&m), "creating the model");
    add(m, "tok", fulmen_model_embedding_new(vocab, d_model, &l), &l);
    add(m, "pos", fulmen_model_embedding_new(context, d_model, &l), &l);
    check(fulmen_model_sequential_new(&blocks), "creating the blocks");
    fulmen_transformer_options o = fulmen_transformer_options_default();
    o.dim_feedforward = 4 * d_model;
    o.dropout = dropout;
    o.activation = FULMEN_ACTIVATION_GELU;
    o.batch_first = true;
    o.norm_first = true;
    for (int64_t i = 0; i < layers; i++) {
        check(fulmen_model_transformer_encoder_layer_new(d_model, heads, &o, &l), "creating a block");
        check(fulmen_model_push(blocks, l), "adding a block");
    }
    add(m, "blocks", NULL, &blocks);
    const int64_t shape[1] = {d_model};
    add(m, "ln", fulmen_model_layer_norm_new(shape, 1, 1e-5, &l), &l);
    add(m, "head", fulmen_model_linear_new(d_model, vocab, true, &l), &l);
    return m;
}

/* Reads the whole file (at most MAX_TEXT bytes) into *data. */
static size_t read_text(const char *path, unsigned char **data) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) { perror(path); exit(1); }
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (buf == NULL) { fprintf(stderr, "charlm: out of memory\n"); exit(1); }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        if (cap >= MAX_TEXT) { fprintf(stderr, "charlm: %s is larger than %u bytes\n", path, MAX_TEXT); exit(1); }
        cap *= 2;
        buf = realloc(buf, cap);
    }
    fclose(f);
    *data = buf;
    return n;
}

/* Windows of `context` ids from ids[0..n]: x = ids[i*T .. i*T+T], y shifted
 * by one. A dataset of [count, T] int64 inputs and targets. */
static fulmen_dataset *windows(const int64_t *ids, size_t n, int64_t context, size_t *count) {
    *count = n > 1 ? (n - 1) / (size_t)context : 0;
    if (*count == 0) { fprintf(stderr, "charlm: the text is shorter than one window\n"); exit(1); }
    size_t cells = *count * (size_t)context;
    int64_t *x = malloc(cells * sizeof *x), *y = malloc(cells * sizeof *y);
    if (x == NULL || y == NULL) { fprintf(stderr, "charlm: out of memory\n"); exit(1); }
    for (size_t i = 0; i < cells; i++) {
        x[i] = ids[i];
        y[i] = ids[i + 1];
    }
    const int64_t shape[2] = {(int64_t)*count, context};
    fulmen_tensor *tx = NULL, *ty = NULL;
    check(fulmen_tensor_from_data(x, cells * sizeof *x, FULMEN_DTYPE_I64, shape, 2, &tx), "windows");
    check(fulmen_tensor_from_data(y, cells * sizeof *y, FULMEN_DTYPE_I64, shape, 2, &ty), "windows");
    free(x);
    free(y);
    const fulmen_tensor *parts[2] = {tx, ty};
    fulmen_dataset *ds = NULL;
    check(fulmen_dataset_from_tensors(parts, 2, &ds), "dataset");
    fulmen_tensor_free(tx);
    fulmen_tensor_free(ty);
    return ds;
}

/* xorshift64*: the sampler's own generator, seeded by --seed. */
static double uniform01(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* Continues `prompt` by `n` characters, sampled at temperature 0.8. */
static void sample(const task *t, const unsigned char *alphabet, const int *index, const char *prompt, long n,
                   uint64_t seed) {
    int64_t *ids = malloc((strlen(prompt) + (size_t)n) * sizeof *ids);
    float *probs = malloc((size_t)t->vocab * sizeof *probs);
    size_t len = 0;
    for (const char *p = prompt; *p; p++)
        if (index[(unsigned char)*p] >= 0) ids[len++] = index[(unsigned char)*p];
    printf("sample: %s", prompt);
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (long k = 0; k < n && len > 0; k++) {
        int64_t l = (int64_t)len < t->context ? (int64_t)len : t->context;
        const int64_t shape[2] = {1, l};
        fulmen_tensor *x = NULL, *mask = NULL, *pos = NULL, *logits = NULL, *last = NULL, *flat = NULL;
        check(fulmen_tensor_from_data(ids + len - l, (size_t)l * sizeof *ids, FULMEN_DTYPE_I64, shape, 2, &x), "sample");
        check(causal_mask(l, &mask), "sample");
        check(fulmen_tensor_arange(0, (double)l, 1, FULMEN_DTYPE_I64, &pos), "sample");
        check(logits_of(t, x, mask, pos, &logits), "sample");
        check(fulmen_tensor_narrow(logits, 1, l - 1, 1, &last), "sample");
        check(fulmen_tensor_to_dtype(last, FULMEN_DTYPE_F32, &flat), "sample");
        check(fulmen_tensor_copy_to(flat, FULMEN_DTYPE_F32, probs, (size_t)t->vocab * sizeof *probs), "sample");
        double top = probs[0], total = 0;
        for (int64_t v = 1; v < t->vocab; v++) top = probs[v] > top ? probs[v] : top;
        for (int64_t v = 0; v < t->vocab; v++) total += (probs[v] = (float)exp((probs[v] - top) / 0.8));
        double r = uniform01(&state) * total;
        int64_t pick = t->vocab - 1;
        for (int64_t v = 0; v < t->vocab; v++) {
            if ((r -= probs[v]) <= 0) { pick = v; break; }
        }
        ids[len++] = pick;
        putchar(alphabet[pick]);
        fulmen_tensor *all[] = {x, mask, pos, logits, last, flat};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) fulmen_tensor_free(all[i]);
    }
    putchar('\n');
    free(ids);
    free(probs);
}

int main(int argc, char **argv) {
    const char *data = NULL, *out = "runs/charlm", *init_out = NULL, *loss_log = NULL;
    long epochs = 3, batch_size = 32, context = 64, d_model = 64, heads = 4, layers = 2, seed = 42, threads = 0;
    long limit_batches = 0, val_batches = -1, sample_chars = 300;
    double lr = 3e-3, dropout = 0.1;
    int shuffle = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-shuffle") == 0) { shuffle = 0; continue; }
        if (v == NULL) { fprintf(stderr, "charlm: %s needs a value\n", a); return 2; }
        if (strcmp(a, "--data") == 0) data = v;
        else if (strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--init-out") == 0) init_out = v;
        else if (strcmp(a, "--loss-log") == 0) loss_log = v;
        else if (strcmp(a, "--epochs") == 0) epochs = atol(v);
        else if (strcmp(a, "--batch-size") == 0) batch_size = atol(v);
        else if (strcmp(a, "--context") == 0) context = atol(v);
        else if (strcmp(a, "--d-model") == 0) d_model = atol(v);
        else if (strcmp(a, "--heads") == 0) heads = atol(v);
        else if (strcmp(a, "--layers") == 0) layers = atol(v);
        else if (strcmp(a, "--dropout") == 0) dropout = atof(v);
        else if (strcmp(a, "--lr") == 0) lr = atof(v);
        else if (strcmp(a, "--seed") == 0) seed = atol(v);
        else if (strcmp(a, "--threads") == 0) threads = atol(v);
        else if (strcmp(a, "--limit-batches") == 0) limit_batches = atol(v);
        else if (strcmp(a, "--val-batches") == 0) val_batches = atol(v);
        else if (strcmp(a, "--sample") == 0) sample_chars = atol(v);
        else { fprintf(stderr, "charlm: unknown option %s\n", a); return 2; }
        i++;
    }
    if (data == NULL || context < 1 || batch_size < 1 || layers < 1) {
        fprintf(stderr, "usage: charlm --data lee_background.txt [--epochs N] [--batch-size N] [--context N] [--d-model N] [--heads N] [--layers N] [--dropout P] [--lr X] [--seed N] [--threads N] [--limit-batches N] [--val-batches N] [--no-shuffle] [--sample N] [--out DIR] [--init-out FILE] [--loss-log FILE]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines in order with the trainer's progress */
    printf("fulmen %s on libtorch %s\n", fulmen_version(), fulmen_libtorch_version());
    if (threads > 0) check(fulmen_set_num_threads((int32_t)threads), "setting threads");
    check(fulmen_manual_seed((uint64_t)seed), "seeding");

    /* The alphabet: the bytes that occur, in order; ids index it. */
    unsigned char *text = NULL, alphabet[256];
    size_t n = read_text(data, &text);
    int index[256], vocab = 0;
    for (int b = 0; b < 256; b++) index[b] = -1;
    for (size_t i = 0; i < n; i++) index[text[i]] = 0;
    for (int b = 0; b < 256; b++)
        if (index[b] == 0) { index[b] = vocab; alphabet[vocab++] = (unsigned char)b; }
    int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (ids == NULL) { fprintf(stderr, "charlm: out of memory\n"); return 1; }
    for (size_t i = 0; i < n; i++) ids[i] = index[text[i]];
    size_t n_train = n / 10 * 9, train_windows = 0, val_windows = 0;
    fulmen_dataset *train = windows(ids, n_train, context, &train_windows);
    fulmen_dataset *val = windows(ids + n_train, n - n_train, context, &val_windows);
    printf("%zu characters, %d distinct; %zu training and %zu validation windows of %ld\n", n, vocab, train_windows,
           val_windows, context);

    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = (size_t)batch_size;
    lo.shuffle = shuffle;
    lo.seed = (uint64_t)seed;
    fulmen_loader *train_loader = NULL, *val_loader = NULL;
    check(fulmen_loader_new(train, &lo, &train_loader), "train loader");
    lo.shuffle = false;
    lo.batch_size = 256;
    check(fulmen_loader_new(val, &lo, &val_loader), "val loader");

    task t = {build_model(vocab, context, d_model, heads, layers, dropout), context, layers, vocab, lr, NULL, NULL, NULL};
    check(causal_mask(context, &t.mask), "mask");
    check(fulmen_tensor_arange(0, (double)context, 1, FULMEN_DTYPE_I64, &t.positions), "positions");
    int64_t n_params = 0;
    check(fulmen_model_num_parameters(t.model, &n_params), "counting parameters");
    printf("GPT: %ld blocks of d_model %ld, %ld heads, context %ld; %lld parameters\n", layers, d_model, heads, context,
           (long long)n_params);
    if (init_out != NULL) check(fulmen_model_save(t.model, init_out), "saving the initial weights");
    if (loss_log != NULL && (t.loss_log = fopen(loss_log, "w")) == NULL) { perror(loss_log); return 1; }

    fulmen_module_vtable vt = {0};
    vt.struct_size = sizeof vt;
    vt.userdata = &t;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *module = NULL;
    check(fulmen_lightning_module_new(&vt, t.model, &module), "creating the module");

    mkdir(out, 0755);
    fulmen_trainer_options *opts = NULL;
    check(fulmen_trainer_options_new(&opts), "options");
    check(fulmen_trainer_options_set_int(opts, "max_epochs", epochs), "max_epochs");
    if (limit_batches > 0) check(fulmen_trainer_options_set_int(opts, "limit_train_batches", limit_batches), "limit");
    if (val_batches >= 0) check(fulmen_trainer_options_set_int(opts, "limit_val_batches", val_batches), "limit");
    check(fulmen_trainer_options_set_int(opts, "num_sanity_val_steps", 0), "num_sanity_val_steps");
    check(fulmen_trainer_options_set(opts, "default_root_dir", out), "default_root_dir");
    check(fulmen_trainer_options_set_int(opts, "log_every_n_steps", 10), "log_every_n_steps");
    fulmen_trainer *trainer = NULL;
    check(fulmen_trainer_new(opts, &trainer), "creating the trainer");
    check(fulmen_trainer_fit(trainer, module, train_loader, val_loader, NULL), "training");
    if (t.loss_log != NULL) fclose(t.loss_log);
    t.loss_log = NULL;

    double bpc = 0;
    if (val_batches != 0) {
        check(fulmen_trainer_callback_metric(trainer, "val_bpc", &bpc), "reading val_bpc");
        printf("final validation: %.4f bits per character\n", bpc);
    }
    char weights[4096];
    snprintf(weights, sizeof weights, "%s/model.safetensors", out);
    check(fulmen_model_save(t.model, weights), "saving the weights");
    printf("weights: %s\n", weights);
    check(fulmen_model_set_training(t.model, false), "eval mode");
    if (sample_chars > 0) sample(&t, alphabet, index, "The ", sample_chars, (uint64_t)seed);

    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_tensor_free(t.mask);
    fulmen_tensor_free(t.positions);
    fulmen_model_free(t.model);
    fulmen_loader_free(train_loader);
    fulmen_loader_free(val_loader);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    free(ids);
    free(text);
    return 0;
}
