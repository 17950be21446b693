/*
 * The fulmen side of tests/interop/export_parity.py: trains a model that
 * python/fulmen_export.py exported (a .pt2 of torch.export programs)
 * through fulmen's Trainer, calling its exported training_step, and writes
 * every step's loss, the trained state_dict and what its forward program
 * gives on held-out rows.
 *
 *   export_parity MODEL.pt2 DATA OPTIMIZER EPOCHS CKPT_DIR RESUME OUT [COMPILED]
 *
 * DATA holds x.bin, y.bin and eval_x.bin (raw, row-major) and spec.txt:
 * "ROWS BATCH EVAL_ROWS SEED", then for x and for y "DTYPE RANK DIMS..." of
 * one row (DTYPE f32 or i64, RANK 0 to 3). The batches are taken in order.
 * OPTIMIZER: sgd (lr 0.05, momentum 0.9) or adamw (lr 3e-3, weight decay
 * 0.01), as the Python side configures torch's. CKPT_DIR: a ModelCheckpoint
 * saves every epoch there (epoch=N.ckpt), "-" for none. RESUME: the
 * checkpoint the fit resumes from, "-" for none. OUT (an existing folder)
 * gets losses.txt (the steps this run takes), state.safetensors (the
 * trained state_dict) and eval.f32 (forward on eval_x after training, in
 * evaluation mode, as float32). COMPILED (optional): compiled training
 * steps (python/fulmen_export.py export_compiled_step), comma-separated,
 * one per batch shape; the steps then run them instead of the program.
 */
#include <fulmen.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANK 3
#define MAX_ROW_ELEMENTS (1L << 20)
#define MAX_ROWS 100000L
#define PATH_CAP 4096

#define TRY(call)                                                                          \
    do {                                                                                   \
        fulmen_error *e_ = (call);                                                         \
        if (e_) {                                                                          \
            fprintf(stderr, "export_parity: %s: %s\n", #call, fulmen_error_message(e_)); \
            fulmen_error_free(e_);                                                         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* One column of the data: its dtype and the shape of one row. */
typedef struct {
    int32_t dtype;
    size_t elem_size;
    size_t rank;
    int64_t dims[MAX_RANK];
    size_t row_elements;
} column;

typedef struct {
    fulmen_model *model;
    const char *optimizer;
    FILE *losses;
    const char *method;
} run;

/* Calls the exported training_step on the batch (a tuple of its tensors);
 * the loss is its result, or the result's "loss" when it is a dict. */
static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss) {
    run *r = ud;
    fulmen_value *arg = NULL, *out = NULL, *item = NULL;
    int32_t kind = FULMEN_VALUE_KIND_NONE;
    double v = 0;
    (void)ctx;
    fulmen_error *e = fulmen_value_from_batch(batch, &arg);
    if (!e) e = fulmen_model_call_method(r->model, NULL, r->method, (const fulmen_value *const *)&arg, 1, &out);
    if (!e) e = fulmen_value_get_kind(out, &kind);
    if (!e && kind == FULMEN_VALUE_KIND_DICT) e = fulmen_value_dict_get(out, "loss", &item);
    if (!e) e = fulmen_value_get_tensor(item ? item : out, loss);
    if (!e) e = fulmen_tensor_item(*loss, &v);
    if (!e) fprintf(r->losses, "%.9g\n", v);
    fulmen_value_free(item);
    fulmen_value_free(out);
    fulmen_value_free(arg);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    run *r = ud;
    fulmen_optimizer *opt = NULL;
    fulmen_error *e;
    if (strcmp(r->optimizer, "sgd") == 0) {
        fulmen_sgd_options o = fulmen_sgd_options_default();
        o.lr = 0.05;
        o.momentum = 0.9;
        e = fulmen_optimizer_sgd_new(r->model, NULL, 0, &o, &opt);
    } else {
        fulmen_adam_options o = fulmen_adamw_options_default();
        o.lr = 3e-3;
        o.weight_decay = 0.01;
        e = fulmen_optimizer_adamw_new(r->model, NULL, 0, &o, &opt);
    }
    if (e) return e;
    e = fulmen_optimizer_config_add(config, opt, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e) fulmen_optimizer_free(opt);
    return e;
}

static void join(char *out, const char *dir, const char *name) {
    int n = snprintf(out, PATH_CAP, "%s/%s", dir, name);
    if (n < 0 || n >= PATH_CAP) {
        fprintf(stderr, "export_parity: path %s/%s is too long\n", dir, name);
        exit(2);
    }
}

/* Reads a column's "DTYPE RANK DIMS..." from spec.txt. */
static int read_column(FILE *f, column *c) {
    char dtype[8];
    unsigned rank = 0;
    if (fscanf(f, "%7s %u", dtype, &rank) != 2 || rank > MAX_RANK) return 0;
    if (strcmp(dtype, "f32") == 0) {
        c->dtype = FULMEN_DTYPE_F32;
        c->elem_size = sizeof(float);
    } else if (strcmp(dtype, "i64") == 0) {
        c->dtype = FULMEN_DTYPE_I64;
        c->elem_size = sizeof(int64_t);
    } else {
        return 0;
    }
    c->rank = rank;
    c->row_elements = 1;
    for (size_t i = 0; i < c->rank; i++) {
        long d = 0;
        if (fscanf(f, "%ld", &d) != 1 || d < 1 || d > MAX_ROW_ELEMENTS) return 0;
        c->dims[i] = d;
        c->row_elements *= (size_t)d;
        if (c->row_elements > (size_t)MAX_ROW_ELEMENTS) return 0;
    }
    return 1;
}

/* The whole file at `path`, which must hold exactly `nbytes` bytes. */
static void *read_exactly(const char *path, size_t nbytes) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    void *buf = malloc(nbytes ? nbytes : 1);
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (buf == NULL || size < 0 || (size_t)size != nbytes || fseek(f, 0, SEEK_SET) != 0 ||
        fread(buf, 1, nbytes, f) != nbytes) {
        fprintf(stderr, "export_parity: %s does not hold the %zu bytes expected (%ld)\n", path, nbytes, size);
        exit(1);
    }
    fclose(f);
    return buf;
}

/* `rows` rows of column `c` from DATA/name, as one tensor. */
static fulmen_tensor *load_rows(const char *data, const char *name, const column *c, long rows) {
    char path[PATH_CAP];
    join(path, data, name);
    size_t nbytes = c->row_elements * c->elem_size * (size_t)rows;
    void *buf = read_exactly(path, nbytes);
    int64_t shape[MAX_RANK + 1] = {rows};
    for (size_t i = 0; i < c->rank; i++) shape[i + 1] = c->dims[i];
    fulmen_tensor *t = NULL;
    TRY(fulmen_tensor_from_data(buf, nbytes, c->dtype, shape, c->rank + 1, &t));
    free(buf);
    return t;
}

/* Runs the forward program on `x` in evaluation mode and writes its
 * outputs as float32 to `path`. */
static void write_eval(fulmen_model *model, const fulmen_tensor *x, const char *path) {
    fulmen_tensor *pred = NULL;
    size_t numel = 0;
    TRY(fulmen_model_set_training(model, false));
    TRY(fulmen_model_forward(model, x, &pred));
    TRY(fulmen_tensor_numel(pred, &numel));
    if (numel == 0 || numel > (size_t)MAX_ROWS * (size_t)MAX_ROW_ELEMENTS) {
        fprintf(stderr, "export_parity: forward gave %zu values\n", numel);
        exit(1);
    }
    float *values = malloc(numel * sizeof(float));
    if (values == NULL) {
        fprintf(stderr, "export_parity: out of memory for %zu outputs\n", numel);
        exit(1);
    }
    TRY(fulmen_tensor_copy_to(pred, FULMEN_DTYPE_F32, values, numel * sizeof(float)));
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(values, sizeof(float), numel, f) != numel || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    free(values);
    fulmen_tensor_free(pred);
}

static long parse_long(const char *s, long lo, long hi, const char *what) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "export_parity: %s must be a whole number in %ld..%ld, got '%s'\n", what, lo, hi, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    if (argc != 8 && argc != 9) {
        fprintf(stderr, "usage: export_parity MODEL.pt2 DATA OPTIMIZER EPOCHS CKPT_DIR RESUME OUT [COMPILED]\n");
        return 2;
    }
    const char *data = argv[2], *ckpt_dir = argv[5], *resume = argv[6], *out = argv[7];
    if (strcmp(argv[3], "sgd") != 0 && strcmp(argv[3], "adamw") != 0) {
        fprintf(stderr, "export_parity: OPTIMIZER is sgd or adamw, got '%s'\n", argv[3]);
        return 2;
    }
    long epochs = parse_long(argv[4], 1, 1000, "EPOCHS");
    TRY(fulmen_abi_check(FULMEN_ABI_VERSION));
    TRY(fulmen_set_num_threads(1));

    char path[PATH_CAP];
    join(path, data, "spec.txt");
    FILE *spec = fopen(path, "r");
    if (spec == NULL) {
        perror(path);
        return 1;
    }
    long rows = 0, batch = 0, eval_rows = 0;
    unsigned long long seed = 0;
    column xc, yc;
    memset(&xc, 0, sizeof xc);
    memset(&yc, 0, sizeof yc);
    int ok = fscanf(spec, "%ld %ld %ld %llu", &rows, &batch, &eval_rows, &seed) == 4 && read_column(spec, &xc) &&
             read_column(spec, &yc);
    fclose(spec);
    if (!ok || rows < 1 || rows > MAX_ROWS || batch < 1 || batch > rows || eval_rows < 1 || eval_rows > MAX_ROWS) {
        fprintf(stderr, "export_parity: %s is not \"ROWS BATCH EVAL_ROWS SEED\" and two columns\n", path);
        return 2;
    }
    fulmen_tensor *x = load_rows(data, "x.bin", &xc, rows);
    fulmen_tensor *y = load_rows(data, "y.bin", &yc, rows);
    fulmen_tensor *eval_x = load_rows(data, "eval_x.bin", &xc, eval_rows);
    const fulmen_tensor *cols[2] = {x, y};
    fulmen_dataset *ds = NULL;
    fulmen_loader *loader = NULL;
    TRY(fulmen_dataset_from_tensors(cols, 2, &ds));
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = (size_t)batch;
    TRY(fulmen_loader_new(ds, &lo, &loader));

    join(path, out, "losses.txt");
    run r = {NULL, argv[3], fopen(path, "w"), "training_step"};
    if (r.losses == NULL) {
        perror(path);
        return 1;
    }
    TRY(fulmen_model_load_exported(argv[1], &r.model));
    if (argc == 9 && strcmp(argv[8], "-") != 0) {
        /* COMPILED: compiled steps, comma-separated, one per batch shape. */
        char list[PATH_CAP * 4];
        if (strlen(argv[8]) >= sizeof list) {
            fprintf(stderr, "export_parity: COMPILED is too long\n");
            return 2;
        }
        strcpy(list, argv[8]);
        for (char *p = strtok(list, ","); p != NULL; p = strtok(NULL, ",")) {
            TRY(fulmen_model_add_compiled_step(r.model, p, "training_step_compiled"));
        }
        r.method = "training_step_compiled";
    }
    fulmen_module_vtable vt = {.struct_size = sizeof vt, .userdata = &r, .training_step = training_step,
                               .configure_optimizers = configure_optimizers};
    fulmen_lightning_module *module = NULL;
    TRY(fulmen_lightning_module_new(&vt, r.model, &module));
    fulmen_trainer_options *o = NULL;
    TRY(fulmen_trainer_options_new(&o));
    TRY(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    TRY(fulmen_trainer_options_set(o, "accelerator", "cpu"));
    TRY(fulmen_trainer_options_set(o, "logger", "false"));
    TRY(fulmen_trainer_options_set_bool(o, "enable_checkpointing", strcmp(ckpt_dir, "-") != 0));
    TRY(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    TRY(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    TRY(fulmen_trainer_options_set_bool(o, "handle_signals", false));
    fulmen_trainer *t = NULL;
    TRY(fulmen_trainer_new(o, &t));
    if (strcmp(ckpt_dir, "-") != 0) {
        fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
        mc.dirpath = ckpt_dir;
        mc.filename = "{epoch}";
        mc.save_top_k = -1;
        TRY(fulmen_trainer_add_model_checkpoint(t, &mc));
    }
    /* torch.manual_seed(SEED) on the Python side, right before its loop:
     * dropout draws the same masks. */
    TRY(fulmen_manual_seed((uint64_t)seed));
    TRY(fulmen_trainer_fit(t, module, loader, NULL, strcmp(resume, "-") != 0 ? resume : NULL));
    if (fclose(r.losses) != 0) {
        perror("losses.txt");
        return 1;
    }
    join(path, out, "state.safetensors");
    TRY(fulmen_model_save(r.model, path));
    join(path, out, "eval.f32");
    write_eval(r.model, eval_x, path);

    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_model_free(r.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_tensor_free(eval_x);
    size_t live = fulmen_live_handles();
    if (live != 0) {
        fprintf(stderr, "export_parity: %zu handles left\n", live);
        return 1;
    }
    return 0;
}
