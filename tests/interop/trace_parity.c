/*
 * The fulmen side of tests/interop/trace_parity.py: builds an MLP with
 * BatchNorm and Dropout, moves its running statistics with one training
 * forward, saves its weights, traces it (fulmen_model_to_torchscript) and
 * saves the trace for torch.jit.load, with the example input and the
 * model's evaluation-mode output as raw float32.
 *
 *   trace_parity DIR   (writes DIR/mlp.safetensors, DIR/mlp_traced.pt,
 *                       DIR/x.f32 (5 x 4), DIR/y.f32 (5 x 3))
 */
#include <fulmen.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define TRY(call)                                                                          \
    do {                                                                                   \
        fulmen_error *e_ = (call);                                                         \
        if (e_) {                                                                          \
            fprintf(stderr, "trace_parity: %s: %s\n", #call, fulmen_error_message(e_));    \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

enum { ROWS = 5, IN = 4, HIDDEN = 16, OUT = 3 };

static void push(fulmen_model *seq, fulmen_model *layer) { TRY(fulmen_model_push(seq, layer)); }

static void write_f32(const char *dir, const char *name, const fulmen_tensor *t, size_t n) {
    char path[4096];
    float *v = malloc(n * sizeof(float));
    TRY(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, v, n * sizeof(float)));
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(v, sizeof(float), n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "trace_parity: cannot write %s\n", path);
        exit(1);
    }
    free(v);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: trace_parity DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    char path[4096];
    TRY(fulmen_manual_seed(3));
    fulmen_model *m = NULL, *l = NULL;
    TRY(fulmen_model_sequential_new(&m));
    TRY(fulmen_model_linear_new(IN, HIDDEN, true, &l));
    push(m, l);
    TRY(fulmen_model_batch_norm_new(HIDDEN, 1e-5, 0.1, &l));
    push(m, l);
    TRY(fulmen_model_activation_new(FULMEN_ACTIVATION_RELU, 0, &l));
    push(m, l);
    TRY(fulmen_model_dropout_new(0.5, &l));
    push(m, l);
    TRY(fulmen_model_linear_new(HIDDEN, OUT, true, &l));
    push(m, l);

    float xs[ROWS * IN], shifted[ROWS * IN];
    for (int i = 0; i < ROWS * IN; i++) {
        xs[i] = sinf(0.7f * (float)i);
        shifted[i] = 3.0f * cosf(0.3f * (float)i) + 1.0f;
    }
    const int64_t shape[2] = {ROWS, IN};
    fulmen_tensor *x = NULL, *s = NULL, *y = NULL;
    TRY(fulmen_tensor_from_data(xs, sizeof xs, FULMEN_DTYPE_F32, shape, 2, &x));
    TRY(fulmen_tensor_from_data(shifted, sizeof shifted, FULMEN_DTYPE_F32, shape, 2, &s));
    TRY(fulmen_model_forward(m, s, &y)); /* running statistics move */
    fulmen_tensor_free(y);
    snprintf(path, sizeof path, "%s/mlp.safetensors", dir);
    TRY(fulmen_model_save(m, path));

    fulmen_model *traced = NULL;
    const fulmen_tensor *inputs[1] = {x};
    TRY(fulmen_model_to_torchscript(m, inputs, 1, &traced));
    snprintf(path, sizeof path, "%s/mlp_traced.pt", dir);
    TRY(fulmen_model_save_torchscript(traced, NULL, path));

    TRY(fulmen_model_set_training(m, false));
    TRY(fulmen_model_forward(m, x, &y));
    write_f32(dir, "x.f32", x, ROWS * IN);
    write_f32(dir, "y.f32", y, ROWS * OUT);
    fulmen_tensor_free(y);
    fulmen_tensor_free(x);
    fulmen_tensor_free(s);
    fulmen_model_free(traced);
    fulmen_model_free(m);
    printf("trace_parity: wrote %s\n", dir);
    return 0;
}
