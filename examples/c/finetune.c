/*
 * Fine-tunes a PyTorch model from C, through fulmen's trainer: a
 * torch.export archive (.pt2, written by python/fulmen_export.py; the
 * recommended form) or TorchScript (.pt; torch.jit.script is deprecated
 * upstream but fulmen still loads it). The model
 * (examples/python/export_tabular.py, which writes either by the file's
 * extension) takes a categorical column through an embedding and numeric
 * features through BatchNorm, has dropout, and brings its own
 * training_step / validation_step / forward: this program only feeds
 * batches to them, through fulmen_model_call_method either way. An
 * exported step takes the batch; a scripted one the batch and batch_idx.
 *
 * The data is Fair's 1978 survey of 6366 married women (shipped with the
 * statsmodels package): predict whether a woman reported an affair from
 * her occupation (category, 6 values) and seven numeric answers (marriage
 * rating, age, years married, children, religiousness, education,
 * husband's occupation). Every fifth row is held out for validation.
 * EarlyStopping watches the validation loss, ModelCheckpoint keeps the
 * best epoch, and the best weights are restored before saving.
 *
 *   finetune --model tabular.pt2|tabular.pt --data fair.csv
 *            [--out runs/finetune] [--epochs 40] [--batch-size 64]
 *            [--lr 3e-3] [--patience 5] [--seed 0]
 *
 * Writes into --out: model.safetensors (the state_dict, buffers included),
 * model.pt (TorchScript, for torch.jit.load; from a .pt model only),
 * checkpoints/, and predictions.csv (the validation rows' inputs and
 * predicted probabilities, softmax of forward) for
 * tests/interop/finetune_check.py to compare with PyTorch.
 */
#include <fulmen.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A bigger file is refused rather than read. */
#define MAX_ROWS 1000000
#define COLUMNS 9
#define NUMERIC 7
#define CATEGORIES 6

static void check(fulmen_error *err, const char *what) {
    if (err != NULL) {
        fprintf(stderr, "finetune: %s: %s (code %d)\n", what, fulmen_error_message(err), fulmen_error_code(err));
        fulmen_error_free(err);
        exit(1);
    }
}

/* The survey, split: category (occupation - 1), the numeric answers, and
 * the target (affairs > 0). */
typedef struct {
    int64_t *category, *target;
    float *numeric;
    size_t n, cap;
} table;

/* Makes room for one more row (doubling). */
static void table_reserve(table *t) {
    if (t->n < t->cap) return;
    t->cap = t->cap == 0 ? 1024 : 2 * t->cap;
    t->category = realloc(t->category, t->cap * sizeof *t->category);
    t->target = realloc(t->target, t->cap * sizeof *t->target);
    t->numeric = realloc(t->numeric, t->cap * NUMERIC * sizeof *t->numeric);
    if (t->category == NULL || t->target == NULL || t->numeric == NULL) {
        fprintf(stderr, "finetune: out of memory\n");
        exit(1);
    }
}

static void table_free(table *t) {
    free(t->category);
    free(t->target);
    free(t->numeric);
}

/* Reads fair.csv (a header, then 9 numbers a row) into train and val. */
static void read_survey(const char *path, table *train, table *val) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    char line[1024];
    if (fgets(line, sizeof line, f) == NULL || strstr(line, "occupation") == NULL) {
        fprintf(stderr, "finetune: %s: not Fair's survey (no header)\n", path);
        exit(1);
    }
    size_t rows = 0;
    *train = (table){0};
    *val = (table){0};
    while (fgets(line, sizeof line, f) != NULL) {
        if (rows >= MAX_ROWS) {
            fprintf(stderr, "finetune: %s has more than %d rows\n", path, MAX_ROWS);
            exit(1);
        }
        double v[COLUMNS];
        char *p = line;
        for (int c = 0; c < COLUMNS; c++) {
            char *end = NULL;
            v[c] = strtod(p, &end);
            if (end == p || (c < COLUMNS - 1 && *end != ',')) {
                fprintf(stderr, "finetune: %s: row %zu is not %d numbers\n", path, rows + 2, COLUMNS);
                exit(1);
            }
            p = end + 1;
        }
        int occupation = (int)v[6];
        if (occupation < 1 || occupation > CATEGORIES) {
            fprintf(stderr, "finetune: %s: row %zu has occupation %g\n", path, rows + 2, v[6]);
            exit(1);
        }
        table *t = rows % 5 == 4 ? val : train;
        table_reserve(t);
        const int numeric_columns[NUMERIC] = {0, 1, 2, 3, 4, 5, 7};
        for (int j = 0; j < NUMERIC; j++) t->numeric[t->n * NUMERIC + j] = (float)v[numeric_columns[j]];
        t->category[t->n] = occupation - 1;
        t->target[t->n] = v[8] > 0 ? 1 : 0;
        t->n++;
        rows++;
    }
    fclose(f);
    if (val->n < 10) {
        fprintf(stderr, "finetune: %s: %zu rows are too few\n", path, rows);
        exit(1);
    }
}

/* The tensors of a table: category [N] int64, numeric [N, 7], target [N]. */
static void table_tensors(const table *t, fulmen_tensor *out[3]) {
    const int64_t n = (int64_t)t->n, nd[2] = {n, NUMERIC};
    check(fulmen_tensor_from_data(t->category, t->n * sizeof(int64_t), FULMEN_DTYPE_I64, &n, 1, &out[0]), "category");
    check(fulmen_tensor_from_data(t->numeric, t->n * NUMERIC * sizeof(float), FULMEN_DTYPE_F32, nd, 2, &out[1]),
          "numeric");
    check(fulmen_tensor_from_data(t->target, t->n * sizeof(int64_t), FULMEN_DTYPE_I64, &n, 1, &out[2]), "target");
}

/* The model and how its steps are called. */
typedef struct {
    fulmen_model *model;
    bool exported; /* a torch.export archive: its steps take the batch only */
} tuned_model;

/* Whether `path` names a torch.export archive (.pt2) rather than a
 * TorchScript file. */
static bool is_exported(const char *path) {
    size_t n = strlen(path);
    return n >= 4 && strcmp(path + n - 4, ".pt2") == 0;
}

/* Calls the model's step `method` on the batch (and batch_idx for a
 * scripted one) and logs its "loss" and "acc" under `prefix`; the loss
 * goes to *loss. */
static fulmen_error *model_step(const tuned_model *m, fulmen_step_context *ctx, const fulmen_batch *batch,
                                const char *method, const char *prefix, fulmen_tensor **loss) {
    fulmen_value *args[2] = {NULL, NULL}, *out = NULL, *l = NULL, *a = NULL; /* released when the step returns */
    fulmen_tensor *acc = NULL;
    int64_t idx = 0;
    char name[32];
    size_t n_args = m->exported ? 1 : 2;
    fulmen_error *err = fulmen_step_context_batch_idx(ctx, &idx);
    if (err == NULL) err = fulmen_value_from_batch(batch, &args[0]);
    if (err == NULL && !m->exported) err = fulmen_value_int(idx, &args[1]);
    if (err == NULL)
        err = fulmen_model_call_method(m->model, NULL, method, (const fulmen_value *const *)args, n_args, &out);
    if (err == NULL) err = fulmen_value_dict_get(out, "loss", &l);
    if (err == NULL) err = fulmen_value_get_tensor(l, loss);
    if (err == NULL) err = fulmen_value_dict_get(out, "acc", &a);
    if (err == NULL) err = fulmen_value_get_tensor(a, &acc);
    /* Logged as tensors, not numbers read from them: a read would make
     * every step wait for a GPU. */
    int32_t when = strcmp(prefix, "train") == 0 ? FULMEN_LOG_ON_EPOCH : FULMEN_LOG_ON_EPOCH | FULMEN_LOG_PROG_BAR;
    snprintf(name, sizeof name, "%s_loss", prefix);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, name, *loss, when, 0);
    snprintf(name, sizeof name, "%s_acc", prefix);
    if (err == NULL) err = fulmen_step_context_log_tensor(ctx, name, acc, when, 0);
    return err;
}

static fulmen_error *training_step(void *model, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss) {
    return model_step(model, ctx, batch, "training_step", "train", loss);
}

static fulmen_error *validation_step(void *model, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    return model_step(model, ctx, batch, "validation_step", "val", &loss);
}

static double learning_rate = 3e-3;

static fulmen_error *configure_optimizers(void *model, fulmen_optimizer_config *config) {
    const tuned_model *m = model;
    fulmen_adam_options o = fulmen_adam_options_default();
    o.lr = learning_rate;
    fulmen_optimizer *adam = NULL;
    fulmen_error *err = fulmen_optimizer_adam_new(m->model, NULL, 0, &o, &adam);
    if (err == NULL) err = fulmen_optimizer_config_add(config, adam, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    return err;
}

/* Writes the validation rows and the model's probabilities, softmax of
 * forward(category, numeric) (in eval mode). */
static void write_predictions(fulmen_model *model, fulmen_tensor *const val[3], const table *t, const char *path) {
    fulmen_value *args[2] = {NULL, NULL}, *out = NULL;
    fulmen_tensor *logits = NULL, *probs = NULL;
    check(fulmen_value_tensor(val[0], &args[0]), "forward input");
    check(fulmen_value_tensor(val[1], &args[1]), "forward input");
    check(fulmen_model_call_method(model, NULL, "forward", (const fulmen_value *const *)args, 2, &out), "forward");
    check(fulmen_value_get_tensor(out, &logits), "logits");
    check(fulmen_tensor_softmax(logits, 1, &probs), "probabilities");
    float *pv = malloc(t->n * 2 * sizeof *pv);
    if (pv == NULL) { fprintf(stderr, "finetune: out of memory\n"); exit(1); }
    check(fulmen_tensor_copy_to(probs, FULMEN_DTYPE_F32, pv, t->n * 2 * sizeof *pv), "reading probabilities");
    FILE *f = fopen(path, "w");
    if (f == NULL) { perror(path); exit(1); }
    fprintf(f, "category,rate_marriage,age,yrs_married,children,religious,educ,occupation_husb,p0,p1\n");
    for (size_t i = 0; i < t->n; i++) {
        fprintf(f, "%lld", (long long)t->category[i]);
        for (int j = 0; j < NUMERIC; j++) fprintf(f, ",%.9g", t->numeric[i * NUMERIC + j]);
        fprintf(f, ",%.9g,%.9g\n", pv[2 * i], pv[2 * i + 1]);
    }
    fclose(f);
    free(pv);
    fulmen_tensor_free(probs);
    fulmen_tensor_free(logits);
    fulmen_value *all[] = {args[0], args[1], out};
    for (size_t i = 0; i < 3; i++) fulmen_value_free(all[i]);
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *data = NULL, *out = "runs/finetune";
    long epochs = 40, batch_size = 64, patience = 5, seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) { fprintf(stderr, "finetune: %s needs a value\n", a); return 2; }
        if (strcmp(a, "--model") == 0) model_path = v;
        else if (strcmp(a, "--data") == 0) data = v;
        else if (strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--epochs") == 0) epochs = strtol(v, NULL, 10);
        else if (strcmp(a, "--batch-size") == 0) batch_size = strtol(v, NULL, 10);
        else if (strcmp(a, "--lr") == 0) learning_rate = strtod(v, NULL);
        else if (strcmp(a, "--patience") == 0) patience = strtol(v, NULL, 10);
        else if (strcmp(a, "--seed") == 0) seed = strtol(v, NULL, 10);
        else { fprintf(stderr, "finetune: unknown option %s\n", a); return 2; }
        i++;
    }
    if (model_path == NULL || data == NULL || epochs < 1 || batch_size < 1 || patience < 1 || learning_rate <= 0) {
        fprintf(stderr, "usage: finetune --model tabular.pt2|tabular.pt --data fair.csv [--out DIR] [--epochs N] "
                        "[--batch-size N] [--lr X] [--patience N] [--seed N]\n");
        return 2;
    }
    check(fulmen_manual_seed((uint64_t)seed), "seeding");
    table train_rows, val_rows;
    read_survey(data, &train_rows, &val_rows);
    size_t positives = 0;
    for (size_t i = 0; i < val_rows.n; i++) positives += (size_t)val_rows.target[i];
    double majority = (double)(positives > val_rows.n - positives ? positives : val_rows.n - positives) / val_rows.n;
    printf("%zu training and %zu validation rows; %.1f%% of the validation rows report an affair\n", train_rows.n,
           val_rows.n, 100.0 * positives / val_rows.n);
    fflush(stdout);

    fulmen_tensor *train_t[3], *val_t[3];
    table_tensors(&train_rows, train_t);
    table_tensors(&val_rows, val_t);
    fulmen_dataset *train_ds = NULL, *val_ds = NULL;
    check(fulmen_dataset_from_tensors((const fulmen_tensor *const *)train_t, 3, &train_ds), "train set");
    check(fulmen_dataset_from_tensors((const fulmen_tensor *const *)val_t, 3, &val_ds), "validation set");
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = (size_t)batch_size;
    lo.shuffle = true;
    lo.seed = (uint64_t)seed;
    fulmen_loader *train_loader = NULL, *val_loader = NULL;
    check(fulmen_loader_new(train_ds, &lo, &train_loader), "train loader");
    lo.shuffle = false;
    lo.batch_size = 512;
    check(fulmen_loader_new(val_ds, &lo, &val_loader), "validation loader");

    tuned_model tuned = {NULL, is_exported(model_path)};
    if (tuned.exported)
        check(fulmen_model_load_exported(model_path, &tuned.model), "loading the exported model");
    else
        check(fulmen_model_load_torchscript(model_path, &tuned.model), "loading the TorchScript model");
    fulmen_model *model = tuned.model;
    printf("%s model %s\n", tuned.exported ? "torch.export" : "TorchScript", model_path);
    fulmen_module_vtable vt = {0};
    vt.struct_size = sizeof vt;
    vt.userdata = &tuned;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *module = NULL;
    check(fulmen_lightning_module_new(&vt, model, &module), "creating the module");

    mkdir(out, 0755);
    fulmen_trainer_options *opts = NULL;
    check(fulmen_trainer_options_new(&opts), "options");
    check(fulmen_trainer_options_set_int(opts, "max_epochs", epochs), "max_epochs");
    check(fulmen_trainer_options_set(opts, "default_root_dir", out), "default_root_dir");
    check(fulmen_trainer_options_set_int(opts, "log_every_n_steps", 20), "log_every_n_steps");
    fulmen_trainer *trainer = NULL;
    check(fulmen_trainer_new(opts, &trainer), "creating the trainer");
    fulmen_early_stopping_options es = fulmen_early_stopping_options_default();
    es.monitor = "val_loss";
    es.patience = patience;
    check(fulmen_trainer_add_early_stopping(trainer, &es), "early stopping");
    char ckpt_dir[4096];
    snprintf(ckpt_dir, sizeof ckpt_dir, "%s/checkpoints", out);
    fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
    mc.dirpath = ckpt_dir;
    mc.filename = "{epoch}-{val_loss:.4f}";
    mc.monitor = "val_loss";
    check(fulmen_trainer_add_model_checkpoint(trainer, &mc), "checkpoint callback");
    check(fulmen_trainer_fit(trainer, module, train_loader, val_loader, NULL), "training");

    /* back to the best epoch's weights (and BatchNorm statistics) */
    check(fulmen_trainer_validate(trainer, module, val_loader, "best"), "validating the best checkpoint");
    double acc = 0, loss = 0;
    int64_t stopped = 0;
    check(fulmen_trainer_callback_metric(trainer, "val_acc", &acc), "reading val_acc");
    check(fulmen_trainer_callback_metric(trainer, "val_loss", &loss), "reading val_loss");
    check(fulmen_trainer_current_epoch(trainer, &stopped), "reading the epoch");
    printf("best epoch: validation loss %.4f, accuracy %.1f%% (always guessing the majority: %.1f%%); "
           "stopped after %lld epochs\n",
           loss, 100 * acc, 100 * majority, (long long)stopped);
    printf("%s\n", acc > majority ? "the fine-tuned model beats the majority guess"
                                  : "the fine-tuned model does NOT beat the majority guess");

    char path[4096];
    check(fulmen_model_set_training(model, false), "eval mode");
    if (!tuned.exported) {
        snprintf(path, sizeof path, "%s/model.pt", out);
        check(fulmen_model_save_torchscript(model, NULL, path), "saving TorchScript");
        printf("TorchScript: %s\n", path);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    check(fulmen_model_save(model, path), "saving the state_dict");
    printf("state_dict: %s\n", path);
    snprintf(path, sizeof path, "%s/predictions.csv", out);
    write_predictions(model, val_t, &val_rows, path);
    printf("predictions: %s\n", path);

    for (int i = 0; i < 3; i++) {
        fulmen_tensor_free(train_t[i]);
        fulmen_tensor_free(val_t[i]);
    }
    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_model_free(model);
    fulmen_loader_free(train_loader);
    fulmen_loader_free(val_loader);
    fulmen_dataset_free(train_ds);
    fulmen_dataset_free(val_ds);
    table_free(&train_rows);
    table_free(&val_rows);
    return 0;
}
