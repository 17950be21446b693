/* fulmen's side of the attention parity check
 * (tests/interop/attention_parity.py builds the same layers in PyTorch
 * from the same seeds and inputs, and compares every output bit for bit).
 *
 *   attention_parity THREADS    prints "<case> <hex floats...>" per output
 *
 * Inputs are exact in float32: ((i * mul) % mod) * scale + offset. A failed
 * call prints its error and exits 1. */
#include <fulmen.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TRY(call)                                                                                              \
    do {                                                                                                       \
        fulmen_error *e_ = (call);                                                                             \
        if (e_) {                                                                                              \
            fprintf(stderr, "attention_parity: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),          \
                    fulmen_error_message(e_));                                                                 \
            fulmen_error_free(e_);                                                                             \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

static fulmen_tensor *pattern(const int64_t *shape, int dims, int mul, int mod, float scale, float offset) {
    int64_t n = 1;
    for (int i = 0; i < dims; i++) n *= shape[i];
    float *x = malloc((size_t)n * sizeof *x);
    if (x == NULL) exit(1);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * mul) % mod) * scale + offset;
    fulmen_tensor *t = NULL;
    TRY(fulmen_tensor_from_data(x, (size_t)n * sizeof *x, FULMEN_DTYPE_F32, shape, dims, &t));
    free(x);
    return t;
}

/* A bool tensor of at most 64 elements: true where ((i * mul) % mod) < cut. */
static fulmen_tensor *bool_pattern(const int64_t *shape, int dims, int mul, int mod, int cut) {
    bool m[64] = {false};
    int64_t n = 1;
    for (int i = 0; i < dims; i++) n *= shape[i];
    if (n > 64) exit(1);
    for (int64_t i = 0; i < n; i++) m[i] = (i * mul) % mod < cut;
    fulmen_tensor *t = NULL;
    TRY(fulmen_tensor_from_data(m, (size_t)n, FULMEN_DTYPE_BOOL, shape, dims, &t));
    return t;
}

static void print(const char *name, const fulmen_tensor *t) {
    size_t n = 0;
    TRY(fulmen_tensor_numel(t, &n));
    float *x = malloc(n * sizeof *x);
    if (x == NULL) exit(1);
    TRY(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, x, n * sizeof *x));
    printf("%s", name);
    for (size_t i = 0; i < n; i++) printf(" %a", (double)x[i]);
    printf("\n");
    free(x);
}

/* Runs `m` on `n` inputs and prints its outputs as `<name>.0`, `<name>.1`. */
static void run(const char *name, fulmen_model *m, const fulmen_tensor **in, size_t n) {
    fulmen_tensor *outs[2] = {NULL, NULL};
    size_t count = 0;
    TRY(fulmen_model_forward_multi(m, NULL, in, n, outs, 2, &count));
    char label[64];
    for (size_t i = 0; i < count; i++) {
        snprintf(label, sizeof label, "%s.%zu", name, i);
        print(label, outs[i]);
        fulmen_tensor_free(outs[i]);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: attention_parity THREADS\n");
        return 2;
    }
    TRY(fulmen_set_num_threads(atoi(argv[1])));
    const int64_t dq[3] = {2, 5, 32}, dk[3] = {2, 6, 32}, dm[2] = {5, 6}, dp[2] = {2, 6};
    const int64_t uq[2] = {5, 32}, uk[2] = {6, 32}, up[1] = {6};
    fulmen_tensor *q = pattern(dq, 3, 7, 13, 0.125f, -0.75f), *k = pattern(dk, 3, 5, 11, 0.125f, -0.5f);
    fulmen_tensor *v = pattern(dk, 3, 3, 7, 0.25f, -0.5f), *fmask = pattern(dm, 2, 5, 11, 0.25f, -1.0f);
    /* Padding: the last two keys of the second sequence; a bool mask that
     * leaves no query without a key. */
    fulmen_tensor *kpm = bool_pattern(dp, 2, 1, 12, 0), *bmask = bool_pattern(dm, 2, 7, 6, 2);
    fulmen_tensor *kpm_last = NULL;
    {
        bool m[12] = {false, false, false, false, false, false, false, false, false, false, true, true};
        TRY(fulmen_tensor_from_data(m, sizeof m, FULMEN_DTYPE_BOOL, dp, 2, &kpm_last));
        fulmen_tensor_free(kpm);
        kpm = kpm_last;
    }
    fulmen_tensor *q1 = pattern(uq, 2, 7, 13, 0.125f, -0.75f), *k1 = pattern(uk, 2, 5, 11, 0.125f, -0.5f);
    fulmen_tensor *v1 = pattern(uk, 2, 3, 7, 0.25f, -0.5f), *p1 = bool_pattern(up, 1, 1, 6, 1);

    fulmen_model *mha = NULL;
    TRY(fulmen_manual_seed(3));
    TRY(fulmen_model_multihead_attention_new(32, 4, 0.0, true, true, &mha));
    const fulmen_tensor *cross[3] = {q, k, v};
    run("cross", mha, cross, 3);
    const fulmen_tensor *masked[5] = {q, k, v, kpm, fmask};
    run("float_masks", mha, masked, 5);
    const fulmen_tensor *bool_masked[5] = {q, k, v, kpm, bmask};
    run("bool_masks", mha, bool_masked, 5);
    const fulmen_tensor *kv[3] = {q, k, k};
    run("key_is_value", mha, kv, 3);
    const fulmen_tensor *self3[3] = {q, q, q};
    run("self_weights", mha, self3, 3);
    fulmen_tensor *self_out = NULL;
    TRY(fulmen_model_forward(mha, q, &self_out));
    print("self.0", self_out);

    /* Sequence first, and unbatched. */
    fulmen_model *seq = NULL;
    TRY(fulmen_manual_seed(4));
    TRY(fulmen_model_multihead_attention_new(32, 4, 0.0, true, false, &seq));
    const int64_t sq[3] = {5, 2, 32}, sk[3] = {6, 2, 32};
    fulmen_tensor *qs = pattern(sq, 3, 7, 13, 0.125f, -0.75f), *ks = pattern(sk, 3, 5, 11, 0.125f, -0.5f);
    fulmen_tensor *vs = pattern(sk, 3, 3, 7, 0.25f, -0.5f);
    const fulmen_tensor *seq_masked[5] = {qs, ks, vs, kpm, fmask};
    run("seq_first", seq, seq_masked, 5);
    const fulmen_tensor *unbatched[5] = {q1, k1, v1, p1, fmask};
    run("unbatched", mha, unbatched, 5);

    /* The transformer layers: self-attention without weights (SDPA), the
     * decoder's attention to the memory (key is value). */
    fulmen_transformer_options o = fulmen_transformer_options_default();
    o.dim_feedforward = 64;
    o.dropout = 0.0;
    o.batch_first = true;
    fulmen_model *enc = NULL, *dec = NULL;
    TRY(fulmen_manual_seed(5));
    TRY(fulmen_model_transformer_encoder_layer_new(32, 4, &o, &enc));
    fulmen_tensor *enc_out = NULL;
    TRY(fulmen_model_forward(enc, q, &enc_out));
    print("encoder.0", enc_out);
    TRY(fulmen_manual_seed(6));
    TRY(fulmen_model_transformer_decoder_layer_new(32, 4, &o, &dec));
    const fulmen_tensor *tgt_mem[6] = {q, k, NULL, NULL, NULL, kpm};
    run("decoder", dec, tgt_mem, 6);
    return 0;
}
