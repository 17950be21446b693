/*
 * A program outside the fulmen tree, built only with
 * `cc train_xor.c $(pkg-config --cflags --libs fulmen)`: it learns XOR with
 * a host-owned loop (forward, loss, backward, optimizer step) and exits 0
 * when every prediction is right.
 */
#include <fulmen.h>

#include <stdio.h>
#include <stdlib.h>

static void ok(fulmen_error *e) {
    if (e != NULL) {
        fprintf(stderr, "train_xor: %s\n", fulmen_error_message(e));
        fulmen_error_free(e);
        exit(1);
    }
}

int main(void) {
    float xs[8] = {0, 0, 0, 1, 1, 0, 1, 1};
    float ys[4] = {0, 1, 1, 0};
    int64_t xshape[2] = {4, 2}, yshape[2] = {4, 1};
    fulmen_tensor *x = NULL, *y = NULL;
    ok(fulmen_manual_seed(0));
    ok(fulmen_tensor_from_data(xs, sizeof xs, FULMEN_DTYPE_F32, xshape, 2, &x));
    ok(fulmen_tensor_from_data(ys, sizeof ys, FULMEN_DTYPE_F32, yshape, 2, &y));

    fulmen_model *net = NULL, *layer = NULL;
    ok(fulmen_model_sequential_new(&net));
    ok(fulmen_model_linear_new(2, 8, true, &layer));
    ok(fulmen_model_push(net, layer));
    ok(fulmen_model_activation_new(FULMEN_ACTIVATION_TANH, 0, &layer));
    ok(fulmen_model_push(net, layer));
    ok(fulmen_model_linear_new(8, 1, true, &layer));
    ok(fulmen_model_push(net, layer));

    fulmen_adam_options o = fulmen_adam_options_default();
    o.lr = 0.05;
    fulmen_optimizer *adam = NULL;
    ok(fulmen_optimizer_adam_new(net, NULL, 0, &o, &adam));
    for (int step = 0; step < 500; step++) {
        fulmen_tensor *logits = NULL, *loss = NULL;
        ok(fulmen_model_forward(net, x, &logits));
        ok(fulmen_loss_bce_with_logits(logits, y, FULMEN_REDUCTION_MEAN, &loss));
        ok(fulmen_optimizer_zero_grad(adam));
        ok(fulmen_tensor_backward(loss));
        ok(fulmen_optimizer_step(adam));
        fulmen_tensor_free(logits);
        fulmen_tensor_free(loss);
    }
    fulmen_tensor *logits = NULL;
    float out[4];
    ok(fulmen_model_forward(net, x, &logits));
    ok(fulmen_tensor_copy_to(logits, FULMEN_DTYPE_F32, out, sizeof out));
    int right = 0;
    for (int i = 0; i < 4; i++) right += (out[i] > 0) == (ys[i] > 0.5f);
    printf("train_xor: %d/4 right with fulmen %s\n", right, fulmen_version());
    fulmen_tensor_free(logits);
    fulmen_optimizer_free(adam);
    fulmen_model_free(net);
    fulmen_tensor_free(x);
    fulmen_tensor_free(y);
    return right == 4 ? 0 : 1;
}
