/*
 * The fulmen side of tests/interop/script_parity.py: trains a LightningModule
 * exported by Lightning's own `to_torchscript` (with its scripted
 * training_step) through fulmen's Trainer and writes every step's loss.
 *
 *   script_parity MODEL.pt X.f32 Y.i64 ROWS FEATURES BATCH EPOCHS LOSSES STATE
 *
 * X.f32 holds ROWS x FEATURES float32 values, Y.i64 ROWS int64 labels; the
 * batches are taken in order; SGD (lr 0.1, momentum 0.9), as the Python
 * side configures it.
 */
#include <fulmen.h>

#include <stdio.h>
#include <stdlib.h>

#define TRY(call)                                                                          \
    do {                                                                                   \
        fulmen_error *e_ = (call);                                                         \
        if (e_) {                                                                          \
            fprintf(stderr, "script_parity: %s: %s\n", #call, fulmen_error_message(e_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

typedef struct {
    fulmen_model *model;
    FILE *losses;
} run;

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss) {
    run *r = ud;
    fulmen_value *args[2], *out, *l;
    int64_t idx = 0;
    double v = 0;
    fulmen_error *e = fulmen_step_context_batch_idx(ctx, &idx);
    if (!e) e = fulmen_value_from_batch(batch, &args[0]);
    if (!e) e = fulmen_value_int(idx, &args[1]);
    if (!e) e = fulmen_model_call_method(r->model, NULL, "training_step", (const fulmen_value *const *)args, 2, &out);
    if (!e) e = fulmen_value_dict_get(out, "loss", &l);
    if (!e) e = fulmen_value_get_tensor(l, loss);
    if (!e) e = fulmen_tensor_item(*loss, &v);
    if (!e) fprintf(r->losses, "%.9g\n", v);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    o.momentum = 0.9;
    fulmen_optimizer *sgd = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(((run *)ud)->model, NULL, 0, &o, &sgd);
    return e ? e : fulmen_optimizer_config_add(config, sgd, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
}

static void *read_file(const char *path, size_t nbytes) {
    FILE *f = fopen(path, "rb");
    void *buf = malloc(nbytes ? nbytes : 1);
    if (!f || !buf || fread(buf, 1, nbytes, f) != nbytes) {
        fprintf(stderr, "script_parity: cannot read %zu bytes from %s\n", nbytes, path);
        exit(1);
    }
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 10) {
        fprintf(stderr, "usage: script_parity MODEL.pt X.f32 Y.i64 ROWS FEATURES BATCH EPOCHS LOSSES STATE\n");
        return 2;
    }
    long rows = atol(argv[4]), features = atol(argv[5]), batch = atol(argv[6]), epochs = atol(argv[7]);
    if (rows < 1 || rows > 1000000 || features < 1 || features > 4096 || batch < 1 || epochs < 1) {
        fprintf(stderr, "script_parity: bad sizes\n");
        return 2;
    }
    TRY(fulmen_set_num_threads(1));
    float *xs = read_file(argv[2], (size_t)(rows * features) * sizeof(float));
    int64_t *ys = read_file(argv[3], (size_t)rows * sizeof(int64_t));
    fulmen_tensor *x = NULL, *y = NULL;
    const int64_t xshape[2] = {rows, features}, yshape[1] = {rows};
    TRY(fulmen_tensor_from_data(xs, (size_t)(rows * features) * sizeof(float), FULMEN_DTYPE_F32, xshape, 2, &x));
    TRY(fulmen_tensor_from_data(ys, (size_t)rows * sizeof(int64_t), FULMEN_DTYPE_I64, yshape, 1, &y));
    const fulmen_tensor *cols[2] = {x, y};
    fulmen_dataset *ds = NULL;
    fulmen_loader *loader = NULL;
    TRY(fulmen_dataset_from_tensors(cols, 2, &ds));
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = (size_t)batch;
    TRY(fulmen_loader_new(ds, &lo, &loader));

    run r = {NULL, fopen(argv[8], "w")};
    if (r.losses == NULL) {
        perror(argv[8]);
        return 1;
    }
    TRY(fulmen_model_load_torchscript(argv[1], &r.model));
    fulmen_module_vtable vt = {.struct_size = sizeof vt, .userdata = &r, .training_step = training_step,
                               .configure_optimizers = configure_optimizers};
    fulmen_lightning_module *module = NULL;
    TRY(fulmen_lightning_module_new(&vt, r.model, &module));
    fulmen_trainer_options *o = NULL;
    TRY(fulmen_trainer_options_new(&o));
    TRY(fulmen_trainer_options_set_int(o, "max_epochs", epochs));
    TRY(fulmen_trainer_options_set(o, "logger", "false"));
    TRY(fulmen_trainer_options_set_bool(o, "enable_checkpointing", false));
    TRY(fulmen_trainer_options_set_bool(o, "enable_progress_bar", false));
    TRY(fulmen_trainer_options_set_bool(o, "enable_model_summary", false));
    fulmen_trainer *t = NULL;
    TRY(fulmen_trainer_new(o, &t));
    TRY(fulmen_trainer_fit(t, module, loader, NULL, NULL));
    fclose(r.losses);
    TRY(fulmen_model_save(r.model, argv[9]));

    fulmen_trainer_free(t);
    fulmen_trainer_options_free(o);
    fulmen_lightning_module_free(module);
    fulmen_model_free(r.model);
    fulmen_loader_free(loader);
    fulmen_dataset_free(ds);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    free(xs);
    free(ys);
    return 0;
}
