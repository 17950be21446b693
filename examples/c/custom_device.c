/*
 * A vendor's own device type in one file: Lightning's XPUAccelerator
 * example, whose get_parallel_devices returns torch.device("xpu", idx),
 * written in C against a PrivateUse1 backend named "npu", training an MLP
 * on MNIST-5k there. With --devices 2 it trains with DDP on npu:0 and
 * npu:1 in two processes (fulmen starts the second), their gradients
 * reduced by the accelerator's own collectives hook (store_collectives.h,
 * where a vendor calls its communication library).
 *
 *   custom_device --data mnist_5k.csv.gz [--epochs 2] [--precision 32-true] [--devices 1|2]
 *
 * A vendor's real backend registers itself with libtorch when its library
 * loads (PyTorch's OpenReg example shows how); this program uses fulmen's
 * fake device instead, a PrivateUse1 backend that keeps tensors in host
 * memory and runs libtorch's CPU kernels, so it runs anywhere. Everything
 * after fulmen_fake_device_register is what a program does with a real
 * one.
 */
#include <fulmen.h>

#include "store_collectives.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(fulmen_error *e, const char *what) {
    if (e == NULL) return;
    fprintf(stderr, "custom_device: %s: %s\n", what, fulmen_error_message(e));
    fulmen_error_free(e);
    exit(1);
}

/* ------------------------------------------------ the accelerator ("npu") */

/* is_available / auto_device_count: what the backend reports. */
static fulmen_error *npu_is_available(void *ud, bool *out) {
    (void)ud;
    size_t n = 0;
    fulmen_error *e = fulmen_device_count(FULMEN_DEVICE_TYPE_PRIVATE_USE1, &n);
    *out = e == NULL && n > 0;
    return e;
}

static fulmen_error *npu_device_count(void *ud, size_t *out) {
    (void)ud;
    return fulmen_device_count(FULMEN_DEVICE_TYPE_PRIVATE_USE1, out);
}

/* get_parallel_devices: [torch.device("npu", i) for i in devices]. */
static fulmen_error *npu_parallel_devices(void *ud, const int64_t *ids, size_t n, fulmen_device *out) {
    (void)ud;
    for (size_t i = 0; i < n; i++) {
        out[i].device_type = FULMEN_DEVICE_TYPE_PRIVATE_USE1;
        out[i].index = ids[i];
    }
    return NULL;
}

/* setup_device: fulmen has made it the thread's current device already. */
static fulmen_error *npu_setup_device(void *ud, fulmen_device device) {
    (void)ud;
    printf("setting up npu:%lld\n", (long long)device.index);
    return NULL;
}

static void register_npu_accelerator(void) {
    /* DDP's collectives through the vendor's library (copied below). */
    fulmen_collectives collectives = store_collectives_table();
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.is_available = npu_is_available;
    vt.auto_device_count = npu_device_count;
    vt.get_parallel_devices = npu_parallel_devices;
    vt.setup_device = npu_setup_device;
    vt.collectives = &collectives;
    /* parse_devices NULL: Lightning's parser over auto_device_count. */
    check(fulmen_accelerator_register("npu", "a PrivateUse1 backend named npu", &vt, false), "registering npu");
}

/* ------------------------------------------------------- the training task */

typedef struct {
    fulmen_model *model;
} task;

/* Logits and cross-entropy of a batch [pixels, labels]; the tensors made in
 * a callback are released when it returns. */
static fulmen_error *forward_loss(task *t, const fulmen_batch *batch, fulmen_tensor **logits, fulmen_tensor **labels,
                                  fulmen_tensor **loss) {
    fulmen_tensor *x = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, labels);
    if (e == NULL) e = fulmen_model_forward(t->model, x, logits);
    if (e == NULL) e = fulmen_loss_cross_entropy(*logits, *labels, FULMEN_REDUCTION_MEAN, loss);
    return e;
}

static fulmen_error *training_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch,
                                   fulmen_tensor **loss_out) {
    fulmen_tensor *logits = NULL, *labels = NULL;
    fulmen_error *e = forward_loss(ud, batch, &logits, &labels, loss_out);
    /* A logged tensor, not a number read from it: a read would make every
     * step wait for the device. */
    if (e == NULL) e = fulmen_step_context_log_tensor(ctx, "train_loss", *loss_out, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

/* val_acc: the fraction of the batch predicted right. */
static fulmen_error *validation_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *logits = NULL, *labels = NULL, *loss = NULL, *pred = NULL, *hit = NULL, *hitf = NULL, *mean = NULL;
    fulmen_error *e = forward_loss(ud, batch, &logits, &labels, &loss);
    if (e == NULL) e = fulmen_tensor_argmax(logits, 1, false, &pred);
    if (e == NULL) e = fulmen_tensor_compare(pred, labels, FULMEN_COMPARE_EQ, &hit);
    if (e == NULL) e = fulmen_tensor_to_dtype(hit, FULMEN_DTYPE_F32, &hitf);
    if (e == NULL) e = fulmen_tensor_mean(hitf, &mean);
    if (e == NULL) e = fulmen_step_context_log_tensor(ctx, "val_acc", mean, FULMEN_LOG_ON_EPOCH, 0);
    return e;
}

static fulmen_error *configure_optimizers(void *ud, fulmen_optimizer_config *config) {
    task *t = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.1;
    fulmen_optimizer *sgd = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(t->model, NULL, 0, &o, &sgd);
    if (e != NULL) return e;
    e = fulmen_optimizer_config_add(config, sgd, NULL, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) fulmen_optimizer_free(sgd);
    return e;
}

static fulmen_model *mlp(void) {
    fulmen_model *m = NULL, *l = NULL;
    check(fulmen_model_sequential_new(&m), "model");
    check(fulmen_model_linear_new(784, 128, true, &l), "linear");
    check(fulmen_model_push(m, l), "push");
    check(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l), "relu");
    check(fulmen_model_push(m, l), "push");
    check(fulmen_model_linear_new(128, 10, true, &l), "linear");
    check(fulmen_model_push(m, l), "push");
    return m;
}

int main(int argc, char **argv) {
    const char *data = NULL, *precision = "32-true", *devices = "1";
    long epochs = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--data") == 0) data = argv[i + 1];
        else if (strcmp(argv[i], "--epochs") == 0) epochs = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--precision") == 0) precision = argv[i + 1];
        else if (strcmp(argv[i], "--devices") == 0) devices = argv[i + 1];
    }
    bool ddp = strcmp(devices, "2") == 0;
    if (data == NULL || epochs < 1 || (!ddp && strcmp(devices, "1") != 0)) {
        fprintf(stderr, "usage: custom_device --data mnist_5k.csv.gz [--epochs N] [--precision P] [--devices 1|2]\n");
        return 2;
    }

    /* The stand-in for a vendor's backend: process-wide, once, first. */
    check(fulmen_fake_device_register("npu", 2), "registering the fake device");
    char name[32];
    size_t len = 0, count = 0;
    check(fulmen_device_type_name(FULMEN_DEVICE_TYPE_PRIVATE_USE1, name, sizeof name, &len), "device name");
    check(fulmen_device_count(FULMEN_DEVICE_TYPE_PRIVATE_USE1, &count), "device count");
    printf("PrivateUse1 backend \"%s\" with %zu device(s)\n", name, count);
    register_npu_accelerator();

    check(fulmen_manual_seed(0), "seeding");
    fulmen_csv_options csv = fulmen_csv_options_default();
    csv.label_column = -1; /* 784 pixels, then the label */
    csv.header = 0;
    csv.scaling = FULMEN_SCALING_DIVIDE;
    csv.scale_divisor = 255.0;
    fulmen_dataset *all = NULL, *val = NULL, *train = NULL;
    check(fulmen_dataset_from_csv(data, &csv, &all), "loading the CSV");
    check(fulmen_dataset_split_every(all, 5, 0, &val, &train), "splitting");
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 64;
    lo.shuffle = true;
    fulmen_loader *train_loader = NULL, *val_loader = NULL;
    check(fulmen_loader_new(train, &lo, &train_loader), "train loader");
    lo.shuffle = false;
    lo.batch_size = 500;
    check(fulmen_loader_new(val, &lo, &val_loader), "val loader");

    task t = {mlp()};
    fulmen_module_vtable vt = {0};
    vt.struct_size = sizeof vt;
    vt.userdata = &t;
    vt.training_step = training_step;
    vt.validation_step = validation_step;
    vt.configure_optimizers = configure_optimizers;
    fulmen_lightning_module *module = NULL;
    check(fulmen_lightning_module_new(&vt, t.model, &module), "module");

    /* Trainer(accelerator="npu", devices=1): the model and every batch go
     * to npu:0, and the run computes there. devices=2: strategy "ddp" on
     * npu:0 and npu:1, one process each. */
    fulmen_trainer_options *opts = NULL;
    check(fulmen_trainer_options_new(&opts), "options");
    check(fulmen_trainer_options_set_int(opts, "max_epochs", epochs), "max_epochs");
    check(fulmen_trainer_options_set(opts, "accelerator", "npu"), "accelerator");
    check(fulmen_trainer_options_set(opts, "devices", devices), "devices");
    if (ddp) check(fulmen_trainer_options_set(opts, "strategy", "ddp"), "strategy");
    check(fulmen_trainer_options_set(opts, "precision", precision), "precision");
    check(fulmen_trainer_options_set(opts, "logger", "false"), "logger");
    check(fulmen_trainer_options_set_bool(opts, "enable_checkpointing", false), "checkpointing");
    check(fulmen_trainer_options_set_bool(opts, "enable_model_summary", false), "summary");
    fulmen_trainer *trainer = NULL;
    check(fulmen_trainer_new(opts, &trainer), "trainer");
    check(fulmen_trainer_fit(trainer, module, train_loader, val_loader, NULL), "training");

    double acc = 0;
    check(fulmen_trainer_callback_metric(trainer, "val_acc", &acc), "val_acc");
    size_t rank = 0, world = 1;
    check(fulmen_distributed_ranks(&rank, NULL, &world), "ranks");
    if (ddp) {
        printf("rank %zu: trained on %zu npu devices with ddp in %s: validation accuracy on its shard %.2f%%\n", rank,
               world, precision, 100.0 * acc);
        /* Rank 0 waits for the rank fulmen started. */
        check(fulmen_distributed_shutdown(120), "ending the job");
    } else {
        printf("trained on npu:0 in %s: final validation accuracy %.2f%%\n", precision, 100.0 * acc);
    }

    fulmen_trainer_free(trainer);
    fulmen_trainer_options_free(opts);
    fulmen_lightning_module_free(module);
    fulmen_model_free(t.model);
    fulmen_loader_free(train_loader);
    fulmen_loader_free(val_loader);
    fulmen_dataset_free(train);
    fulmen_dataset_free(val);
    fulmen_dataset_free(all);
    check(fulmen_accelerator_unregister("npu"), "unregistering npu");
    return acc > 0.8 ? 0 : 1;
}
