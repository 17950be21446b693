/*
 * What foreach and fused updates gain: the time of one optimizer step
 * (AdamW, lr 1e-3, weight decay 1e-2; SGD, lr 0.1, momentum 0.9) over an
 * MLP of LAYERS Linear(WIDTH, WIDTH) layers, with the for-loop update
 * (FULMEN_FOREACH_OFF), with fulmen_optimizer_set_foreach (torch's
 * foreach=True) and with fulmen_optimizer_set_fused (torch's fused=True).
 * The gradients come from one backward and stay; the step is repeated.
 * On cuda the model is on cuda:0 and each timed step ends with the
 * device synchronized. Prints one JSON line per run:
 *   {"optimizer": "adamw", "update": "for-loop", "step_ms": median ms per step}
 *
 *   optim_bench [--width 256] [--layers 16] [--steps 50] [--threads 1] [--device cpu|cuda]
 */
#define _POSIX_C_SOURCE 200809L

#include <fulmen.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void check(fulmen_error *err, const char *what) {
    if (err != NULL) {
        fprintf(stderr, "optim_bench: %s: %s\n", what, fulmen_error_message(err));
        exit(1);
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The device the bench runs on. */
static int32_t device = FULMEN_DEVICE_TYPE_CPU;

/* An MLP of `layers` Linear(width, width) with ReLU between, on `device`,
 * its gradients filled by one backward of a random batch. */
static fulmen_model *model_with_grads(int64_t width, int layers) {
    fulmen_model *m, *layer;
    check(fulmen_model_sequential_new(&m), "sequential");
    for (int i = 0; i < layers; i++) {
        check(fulmen_model_linear_new(width, width, true, &layer), "linear");
        check(fulmen_model_push(m, layer), "push");
        if (i + 1 < layers) {
            check(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0.0, &layer), "relu");
            check(fulmen_model_push(m, layer), "push");
        }
    }
    check(fulmen_model_to_device(m, device, 0), "model to device");
    int64_t shape[2] = {64, width};
    fulmen_tensor *host, *x, *y, *loss;
    check(fulmen_tensor_randn(shape, 2, FULMEN_DTYPE_F32, &host), "randn");
    check(fulmen_tensor_to_device(host, device, 0, &x), "batch to device");
    fulmen_tensor_free(host);
    check(fulmen_model_forward(m, x, &y), "forward");
    check(fulmen_tensor_sum(y, &loss), "sum");
    check(fulmen_tensor_backward(loss), "backward");
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    fulmen_tensor_free(loss);
    return m;
}

/* Median ms of one step of `opt` over `steps` (after 5 warm-up steps). */
static double step_ms(fulmen_optimizer *opt, int steps) {
    double *t = malloc(sizeof(double) * (size_t)steps);
    if (t == NULL) exit(1);
    for (int i = 0; i < 5; i++) check(fulmen_optimizer_step(opt), "warm-up step");
    check(fulmen_device_synchronize(device, 0), "synchronize");
    for (int i = 0; i < steps; i++) {
        double start = now();
        check(fulmen_optimizer_step(opt), "step");
        check(fulmen_device_synchronize(device, 0), "synchronize");
        t[i] = 1e3 * (now() - start);
    }
    qsort(t, (size_t)steps, sizeof(double), compare);
    double median = t[steps / 2];
    free(t);
    return median;
}

int main(int argc, char **argv) {
    int64_t width = 256;
    int layers = 16, steps = 50, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--width") == 0) width = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--layers") == 0) layers = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--device") == 0 && strcmp(argv[i + 1], "cpu") == 0) device = FULMEN_DEVICE_TYPE_CPU;
        else if (strcmp(argv[i], "--device") == 0 && strcmp(argv[i + 1], "cuda") == 0) device = FULMEN_DEVICE_TYPE_CUDA;
        else {
            fprintf(stderr,
                    "usage: optim_bench [--width N] [--layers N] [--steps N] [--threads N] [--device cpu|cuda]\n");
            return 2;
        }
    }
    if (width < 1 || layers < 1 || steps < 1 || threads < 1) {
        fprintf(stderr, "optim_bench: width, layers, steps and threads must be >= 1\n");
        return 2;
    }
    check(fulmen_set_num_threads(threads), "threads");
    check(fulmen_manual_seed(0), "seed");
    const char *names[2] = {"adamw", "sgd"};
    const char *updates[3] = {"for-loop", "foreach", "fused"};
    for (int kind = 0; kind < 2; kind++) {
        for (int update = 0; update < 3; update++) {
            fulmen_model *m = model_with_grads(width, layers);
            fulmen_optimizer *opt = NULL;
            if (kind == 0) {
                fulmen_adam_options o = fulmen_adamw_options_default();
                check(fulmen_optimizer_adamw_new(m, NULL, 0, &o, &opt), "adamw");
            } else {
                fulmen_sgd_options o = fulmen_sgd_options_default();
                o.lr = 0.1;
                o.momentum = 0.9;
                check(fulmen_optimizer_sgd_new(m, NULL, 0, &o, &opt), "sgd");
            }
            check(fulmen_optimizer_set_foreach(opt, update == 1 ? FULMEN_FOREACH_ON : FULMEN_FOREACH_OFF),
                  "set_foreach");
            check(fulmen_optimizer_set_fused(opt, update == 2), "set_fused");
            double ms = step_ms(opt, steps);
            printf("{\"optimizer\": \"%s\", \"update\": \"%s\", \"step_ms\": %.4f}\n", names[kind],
                   updates[update], ms);
            fflush(stdout);
            fulmen_optimizer_free(opt);
            fulmen_model_free(m);
        }
    }
    return 0;
}
