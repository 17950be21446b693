/*
 * The C side of tests/interop/torch_save_check.py: weights between fulmen
 * and PyTorch / Lightning through `torch.save` files.
 *
 *   torch_save_interop load WEIGHTS X.f32 N OUT.f32   load WEIGHTS (any
 *       format fulmen reads) into Sequential(Linear(2, 8), Tanh(),
 *       Linear(8, 2)), run it on the N x 2 float32 inputs, write the N x 2
 *       outputs
 *   torch_save_interop save PREFIX                     write a seeded model
 *       as PREFIX.pt (torch.save) and PREFIX.safetensors
 *   torch_save_interop refuse WEIGHTS                  loading must fail
 *       with FULMEN_CODE_FORMAT (exit 0 when it does)
 */
#include <fulmen.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(fulmen_error *e, const char *what) {
    if (e != NULL) {
        fprintf(stderr, "torch_save_interop: %s: %s\n", what, fulmen_error_message(e));
        exit(1);
    }
}

static fulmen_model *mlp(void) {
    fulmen_model *m = NULL, *l = NULL;
    check(fulmen_model_sequential_new(&m), "model");
    check(fulmen_model_linear_new(2, 8, true, &l), "linear");
    check(fulmen_model_push(m, l), "push");
    check(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l), "tanh");
    check(fulmen_model_push(m, l), "push");
    check(fulmen_model_linear_new(8, 2, true, &l), "linear");
    check(fulmen_model_push(m, l), "push");
    return m;
}

static int load(const char *weights, const char *xpath, long n, const char *out) {
    fulmen_model *m = mlp();
    check(fulmen_model_load(m, weights, true), "load");
    float *x = calloc((size_t)n * 2, sizeof(float)), *y = calloc((size_t)n * 2, sizeof(float));
    FILE *f = fopen(xpath, "rb");
    if (x == NULL || y == NULL || f == NULL || fread(x, sizeof(float), (size_t)n * 2, f) != (size_t)n * 2) {
        fprintf(stderr, "torch_save_interop: cannot read %s\n", xpath);
        return 1;
    }
    fclose(f);
    int64_t shape[2] = {n, 2};
    fulmen_tensor *xt = NULL, *yt = NULL;
    check(fulmen_tensor_from_data(x, (size_t)n * 2 * sizeof(float), FULMEN_DTYPE_F32, shape, 2, &xt), "x");
    check(fulmen_model_set_training(m, false), "eval");
    check(fulmen_model_forward(m, xt, &yt), "forward");
    check(fulmen_tensor_copy_to(yt, FULMEN_DTYPE_F32, y, (size_t)n * 2 * sizeof(float)), "y");
    f = fopen(out, "wb");
    if (f == NULL || fwrite(y, sizeof(float), (size_t)n * 2, f) != (size_t)n * 2 || fclose(f) != 0) return 1;
    fulmen_tensor_free(yt);
    fulmen_tensor_free(xt);
    fulmen_model_free(m);
    free(x);
    free(y);
    return 0;
}

static int save(const char *prefix) {
    char path[1024];
    check(fulmen_manual_seed(7), "seed");
    fulmen_model *m = mlp();
    snprintf(path, sizeof path, "%s.pt", prefix);
    check(fulmen_model_save(m, path), "save .pt");
    snprintf(path, sizeof path, "%s.safetensors", prefix);
    check(fulmen_model_save(m, path), "save .safetensors");
    fulmen_model_free(m);
    return 0;
}

static int refuse(const char *weights) {
    fulmen_model *m = mlp();
    fulmen_error *e = fulmen_model_load(m, weights, true);
    int ok = e != NULL && fulmen_error_code(e) == FULMEN_CODE_FORMAT;
    printf("%s: %s\n", weights, e != NULL ? fulmen_error_message(e) : "loaded");
    fulmen_error_free(e);
    fulmen_model_free(m);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "load") == 0) return load(argv[2], argv[3], atol(argv[4]), argv[5]);
    if (argc == 3 && strcmp(argv[1], "save") == 0) return save(argv[2]);
    if (argc == 3 && strcmp(argv[1], "refuse") == 0) return refuse(argv[2]);
    fprintf(stderr, "usage: torch_save_interop load WEIGHTS X.f32 N OUT.f32 | save PREFIX | refuse WEIGHTS\n");
    return 2;
}
