/*
 * The fulmen side of tests/interop/flops_parity.py: measures a model's
 * FLOPs as Lightning's measure_flops(model, lambda: model(x), lambda y:
 * y.sum()) does, forward only and with backward, and through
 * fulmen_measure_flops around a host's forward and backward.
 *
 *   flops_parity [--cuda] [--formulas] MODEL (torchscript|exported) (float|long) DIM...
 *   flops_parity [--cuda] [--formulas] - (encoder_layer|encoder_layer_norm_first) float DIM...
 *
 * Prints "forward N", "backward N" and "host N" lines, and for a float
 * input "backward_input N" (the input requiring a gradient, which the
 * backward then computes too); then the counts by module of the backward
 * and host measurements as "by_module (backward|host) MODULE OPERATOR N"
 * lines, and the backward's FlopCounterMode table (depth 2) as lines
 * starting "table|". The input holds ones
 * (FLOPs depend on shapes only). With --cuda the model and input are moved
 * to cuda:0 first (the GPU kit's flops-cuda: CUDA's attention kernels).
 * With --formulas the host's formulas below are registered first, as
 * flops_parity.py's FORMULAS are FlopCounterMode's custom_mapping.
 */
#include <fulmen.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                         \
    do {                                                                                  \
        fulmen_error *e_ = (call);                                                        \
        if (e_) {                                                                         \
            fprintf(stderr, "flops_parity: %s: %s\n", #call, fulmen_error_message(e_)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

typedef struct {
    fulmen_model *model;
    const fulmen_tensor *input;
} forward_call;

/* What fulmen_measure_flops measures: one forward and its backward, as a
 * host's own step would run them. */
static fulmen_error *forward_backward(void *userdata) {
    forward_call *c = userdata;
    fulmen_tensor *y = NULL, *loss = NULL;
    fulmen_error *e = fulmen_model_forward(c->model, c->input, &y);
    if (!e) e = fulmen_tensor_sum(y, &loss);
    if (!e) e = fulmen_tensor_backward(loss);
    fulmen_tensor_free(loss);
    fulmen_tensor_free(y);
    return e;
}

/* Prints every module's operator counts (Global left out) as by_module lines. */
static void print_by_module(const char *what, const fulmen_flop_counts *c) {
    size_t modules = 0, len = 0;
    char module[512], op[256];
    TRY(fulmen_flop_counts_num_modules(c, &modules));
    for (size_t i = 1; i < modules; i++) {
        TRY(fulmen_flop_counts_module_name(c, i, module, sizeof module, &len));
        size_t ops = 0;
        TRY(fulmen_flop_counts_num_operators(c, module, &ops));
        for (size_t k = 0; k < ops; k++) {
            uint64_t n = 0;
            TRY(fulmen_flop_counts_operator(c, module, k, op, sizeof op, &len, &n));
            printf("by_module %s %s %s %llu\n", what, module, op, (unsigned long long)n);
        }
    }
}

/* Prints the table get_table(2) prints, each line after "table|". */
static void print_table(const fulmen_flop_counts *c) {
    size_t len = 0;
    fulmen_error *e = fulmen_flop_counts_table(c, 2, NULL, 0, &len);
    fulmen_error_free(e);
    char *text = malloc(len + 1);
    if (!text) exit(1);
    TRY(fulmen_flop_counts_table(c, 2, text, len + 1, &len));
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) printf("table|%s\n", line);
    free(text);
}

static uint64_t numel(const fulmen_flop_value *v) {
    uint64_t n = 1;
    for (size_t i = 0; i < v->ndim; i++) n *= (uint64_t)v->shape[i];
    return n;
}

/* The formulas of flops_parity.py's FORMULAS, by operator. */
static fulmen_error *host_formula(void *ud, const char *op, const fulmen_flop_value *in, size_t n_in,
                                  const fulmen_flop_value *out, size_t n_out, uint64_t *flops) {
    (void)ud;
    if (n_in < 1 || n_out < 1 || in[0].kind != FULMEN_FLOP_VALUE_KIND_TENSOR) {
        return fulmen_error_new(FULMEN_CODE_CALLBACK, "unexpected arguments");
    }
    if (strcmp(op, "aten::gelu") == 0) {
        *flops = 8 * numel(&in[0]);
    } else if (strcmp(op, "aten::gelu_backward") == 0) {
        *flops = 10 * numel(&in[1]);
    } else if (strcmp(op, "aten::native_layer_norm") == 0) {
        *flops = 5 * numel(&in[0]) + in[1].num_ints;
    } else if (strcmp(op, "aten::native_layer_norm_backward") == 0) {
        *flops = 7 * numel(&in[0]);
    } else if (strcmp(op, "aten::_softmax") == 0) {
        *flops = 3 * numel(&in[0]);
    } else if (strcmp(op, "aten::relu") == 0) {
        *flops = numel(&out[0]);
    } else if (strcmp(op, "aten::mm") == 0) {
        const int64_t *a = in[0].shape, *b = in[1].shape;
        *flops = (uint64_t)(2 * a[0] * a[1] * b[1]) + numel(&out[0]);
    } else {
        return fulmen_error_new(FULMEN_CODE_CALLBACK, "no formula");
    }
    return NULL;
}

static void register_formulas(void) {
    const char *ops[] = {
        "aten::gelu", "aten::gelu_backward", "aten::native_layer_norm", "aten::native_layer_norm_backward",
        "aten::_softmax", "aten::relu", "aten::mm",
    };
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        TRY(fulmen_flops_register_formula(ops[i], host_formula, NULL, NULL));
    }
}

/* fulmen's own TransformerEncoderLayer(32, 4, 64, 0.1, "gelu",
 * batch_first=True[, norm_first=True]), as flops_parity.py builds torch's. */
static fulmen_model *encoder_layer(bool norm_first) {
    fulmen_transformer_options o = fulmen_transformer_options_default();
    o.dim_feedforward = 64;
    o.dropout = 0.1;
    o.activation = FULMEN_ACTIVATION_GELU;
    o.batch_first = true;
    o.norm_first = norm_first;
    fulmen_model *m = NULL;
    TRY(fulmen_model_transformer_encoder_layer_new(32, 4, &o, &m));
    return m;
}

/* The model at `path` (a TorchScript or exported file), or one of fulmen's
 * own layers ("encoder_layer", "encoder_layer_norm_first"; no path). */
static fulmen_model *load(const char *path, const char *kind) {
    fulmen_model *m = NULL;
    if (strcmp(kind, "encoder_layer") == 0 || strcmp(kind, "encoder_layer_norm_first") == 0) {
        return encoder_layer(strcmp(kind, "encoder_layer_norm_first") == 0);
    }
    if (strcmp(kind, "torchscript") == 0) {
        TRY(fulmen_model_load_torchscript(path, &m));
    } else {
        TRY(fulmen_model_load_exported(path, &m));
    }
    return m;
}

int main(int argc, char **argv) {
    int cuda = 0, formulas = 0;
    while (argc > 1 && strncmp(argv[1], "--", 2) == 0) {
        if (strcmp(argv[1], "--cuda") == 0) {
            cuda = 1;
        } else if (strcmp(argv[1], "--formulas") == 0) {
            formulas = 1;
        } else {
            break;
        }
        argv++;
        argc--;
    }
    if (argc < 5) {
        fprintf(stderr,
                "usage: flops_parity [--cuda] [--formulas] MODEL (torchscript|exported|encoder_layer|"
                "encoder_layer_norm_first) (float|long) DIM...\n");
        return 2;
    }
    if (formulas) register_formulas();
    int64_t shape[8];
    size_t ndim = 0;
    for (int i = 4; i < argc && ndim < 8; i++) shape[ndim++] = strtoll(argv[i], NULL, 10);
    int32_t dtype = strcmp(argv[3], "long") == 0 ? FULMEN_DTYPE_I64 : FULMEN_DTYPE_F32;

    fulmen_tensor *x = NULL;
    TRY(fulmen_tensor_ones(shape, ndim, dtype, &x));
    if (cuda) {
        fulmen_tensor *on_device = NULL;
        TRY(fulmen_tensor_to_device(x, FULMEN_DEVICE_TYPE_CUDA, 0, &on_device));
        fulmen_tensor_free(x);
        x = on_device;
    }
    uint64_t n = 0;

    fulmen_model *model = load(argv[1], argv[2]);
    if (cuda) TRY(fulmen_model_to_device(model, FULMEN_DEVICE_TYPE_CUDA, 0));
    TRY(fulmen_model_measure_flops(model, x, false, &n));
    printf("forward %llu\n", (unsigned long long)n);
    TRY(fulmen_model_measure_flops(model, x, true, &n));
    printf("backward %llu\n", (unsigned long long)n);
    forward_call call = {model, x};
    TRY(fulmen_measure_flops(forward_backward, &call, &n));
    printf("host %llu\n", (unsigned long long)n);
    fulmen_flop_counts *counts = NULL;
    TRY(fulmen_model_measure_flops_by_module(model, x, true, &counts));
    print_by_module("backward", counts);
    print_table(counts);
    fulmen_flop_counts_free(counts);
    TRY(fulmen_measure_flops_by_module(forward_backward, &call, &counts));
    print_by_module("host", counts);
    fulmen_flop_counts_free(counts);
    if (dtype == FULMEN_DTYPE_F32) {
        TRY(fulmen_tensor_set_requires_grad(x, true));
        TRY(fulmen_model_measure_flops(model, x, true, &n));
        printf("backward_input %llu\n", (unsigned long long)n);
    }

    fulmen_model_free(model);

    fulmen_tensor_free(x);
    return 0;
}
