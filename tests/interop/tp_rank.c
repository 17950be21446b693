/*
 * One fulmen rank of tests/interop/tensor_parallel_mixed.py's jobs:
 *
 *     tp_rank INIT OUT STEPS [uneven]
 *
 * Started with torchrun's variables, it joins the job, loads the model
 * (Embedding(16, 8), Linear(8, 12), Tanh, Linear(12, 8), Linear(8, 16,
 * bias=False); with "uneven" the Embedding's rows and Linear 4's
 * outputs do not divide by two ranks: Embedding(17, 7), Linear(7, 12),
 * Tanh, Linear(12, 9), Linear(9, 17, bias=False)) from INIT, splits it with fulmen_tensor_parallel (the
 * Embedding's rows, Linear 1 by columns, Linear 3 by rows, Linear 4 by
 * columns with its output gathered), trains STEPS steps of SGD (lr 0.2,
 * momentum 0.9) on the script's batches, writes each step's loss to
 * OUT.losses, and after unshard the whole model to OUT (safetensors).
 */
#include <fulmen.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 16
#define BATCH 12

static int fail(const char *what, fulmen_error *e) {
    fprintf(stderr, "tp_rank: %s: %s\n", what, fulmen_error_message(e));
    fulmen_error_free(e);
    return 1;
}

#define TRY(what, expr)                            \
    do {                                           \
        fulmen_error *e_ = (expr);                 \
        if (e_ != NULL) return fail((what), e_);   \
    } while (0)

/* Pushes the layer `made` wrote to `*layer` (its error, if any, first). */
static fulmen_error *push(fulmen_model *m, fulmen_error *made, fulmen_model **layer) {
    return made != NULL ? made : fulmen_model_push(m, *layer);
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "uneven") == 0)) {
        fprintf(stderr, "usage: tp_rank INIT OUT STEPS [uneven]\n");
        return 2;
    }
    /* Embedding rows and columns, Linear 1's outputs, Linear 3's, Linear 4's. */
    const int64_t even[5] = {VOCAB, 8, 12, 8, VOCAB}, odd[5] = {VOCAB + 1, 7, 12, 9, VOCAB + 1};
    const int64_t *d = argc == 5 ? odd : even;
    int steps = atoi(argv[3]);
    fulmen_strategy *strategy = NULL;
    TRY("strategy", fulmen_strategy_new("ddp", &strategy));
    TRY("timeout", fulmen_strategy_set(strategy, "timeout", "60"));
    TRY("join", fulmen_distributed_join(strategy, 1, false));
    fulmen_model *m = NULL, *l = NULL;
    TRY("sequential", fulmen_model_sequential_new(&m));
    TRY("embedding", push(m, fulmen_model_embedding_new(d[0], d[1], &l), &l));
    TRY("linear 1", push(m, fulmen_model_linear_new(d[1], d[2], true, &l), &l));
    TRY("tanh", push(m, fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &l), &l));
    TRY("linear 3", push(m, fulmen_model_linear_new(d[2], d[3], true, &l), &l));
    TRY("linear 4", push(m, fulmen_model_linear_new(d[3], d[4], false, &l), &l));
    TRY("load", fulmen_model_load(m, argv[1], true));
    const char *modules[] = {"0", "1", "3", "4"};
    const int32_t styles[] = {FULMEN_PARALLEL_STYLE_ROWWISE_REPLICATED_INPUT, FULMEN_PARALLEL_STYLE_COLWISE,
                              FULMEN_PARALLEL_STYLE_ROWWISE, FULMEN_PARALLEL_STYLE_COLWISE_REPLICATED_OUTPUT};
    fulmen_tensor_parallel *tp = NULL;
    TRY("tensor parallel", fulmen_tensor_parallel_new(m, modules, styles, 4, &tp));
    fulmen_sgd_options so = fulmen_sgd_options_default();
    so.lr = 0.2;
    so.momentum = 0.9;
    fulmen_optimizer *opt = NULL;
    TRY("sgd", fulmen_optimizer_sgd_new(m, NULL, 0, &so, &opt));
    char path[4096];
    snprintf(path, sizeof path, "%s.losses", argv[2]);
    FILE *losses = fopen(path, "w");
    if (losses == NULL) return 1;
    for (int s = 0; s < steps; s++) {
        int64_t x[BATCH], y[BATCH], shape = BATCH;
        for (int i = 0; i < BATCH; i++) {
            x[i] = (i * (s * 5 + 3) + s) % VOCAB;
            y[i] = (x[i] * 7 + 1) % VOCAB;
        }
        fulmen_tensor *xt = NULL, *yt = NULL, *logits = NULL, *loss = NULL;
        TRY("ids", fulmen_tensor_from_data(x, sizeof x, FULMEN_DTYPE_I64, &shape, 1, &xt));
        TRY("targets", fulmen_tensor_from_data(y, sizeof y, FULMEN_DTYPE_I64, &shape, 1, &yt));
        TRY("zero_grad", fulmen_optimizer_zero_grad(opt));
        TRY("forward", fulmen_model_forward(m, xt, &logits));
        TRY("loss", fulmen_loss_cross_entropy(logits, yt, FULMEN_REDUCTION_MEAN, &loss));
        double value = 0;
        TRY("item", fulmen_tensor_item(loss, &value));
        fprintf(losses, "%.17g\n", value);
        TRY("backward", fulmen_tensor_backward(loss));
        TRY("step", fulmen_optimizer_step(opt));
        fulmen_tensor_free(xt);
        fulmen_tensor_free(yt);
        fulmen_tensor_free(logits);
        fulmen_tensor_free(loss);
    }
    fclose(losses);
    fulmen_optimizer *opts[] = {opt};
    TRY("unshard", fulmen_tensor_parallel_unshard(tp, opts, 1));
    fulmen_tensor_parallel_free(tp);
    TRY("save", fulmen_model_save(m, argv[2]));
    fulmen_optimizer_free(opt);
    fulmen_model_free(m);
    fulmen_strategy_free(strategy);
    TRY("shutdown", fulmen_distributed_shutdown(60));
    return 0;
}
