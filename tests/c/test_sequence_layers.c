/*
 * Tests of the sequence layers run through fulmen_model_forward_multi:
 * LSTM, GRU and RNN (stacked, bidirectional, packed by lengths), multi-head
 * attention with masks, and the transformer encoder / decoder layers.
 * state_dict names and results are PyTorch 2.13's after the same
 * torch.manual_seed (computed with torch and written here, as a weighted
 * sum per tensor: sum(v[i] * i) / n); bad arguments give clear errors.
 */
#include "check.h"
#include "tensor_check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True) after
 * manual_seed(0): plain, then packed by lengths {3, 5} (unsorted). */
static void test_lstm(void) {
    fulmen_model *m = NULL, *bad = NULL;
    fulmen_rnn_options o = fulmen_rnn_options_default();
    o.num_layers = 2;
    o.bidirectional = true;
    o.batch_first = true;
    CHECK_OK(fulmen_manual_seed(0));
    CHECK_OK(fulmen_model_lstm_new(3, 4, &o, &m));
    static const char *const names[] = {
        "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
        "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
        "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
        "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse",
    };
    expect_names(m, names, 16);
    const int64_t d253[3] = {2, 5, 3}, d258[3] = {2, 5, 8}, d424[3] = {4, 2, 4};
    fulmen_tensor *x = wave(d253, 3, 1.0f);
    fulmen_tensor *outs[3] = {NULL, NULL, NULL};
    size_t count = 0;
    const fulmen_tensor *in1[1] = {x};
    CHECK_OK(fulmen_model_forward_multi(m, NULL, in1, 1, outs, 3, &count));
    CHECK(count == 3);
    EXPECT_SHAPE(outs[0], d258, 3);
    EXPECT_SHAPE(outs[1], d424, 3);
    EXPECT_WS(outs[0], 0.16860058607708198);
    EXPECT_WS(outs[1], 0.030569992333767004);
    EXPECT_WS(outs[2], -0.2778701036586426);
    /* forward gives the output sequence alone. */
    fulmen_tensor *y = NULL;
    CHECK_OK(fulmen_model_forward(m, x, &y));
    EXPECT_WS(y, 0.16860058607708198);
    free_all(outs, 3);

    const int64_t lens[2] = {3, 5}, d2[1] = {2};
    fulmen_tensor *lengths = NULL;
    CHECK_OK(fulmen_tensor_from_data(lens, sizeof lens, FULMEN_DTYPE_I64, d2, 1, &lengths));
    const fulmen_tensor *in4[4] = {x, NULL, NULL, lengths};
    CHECK_OK(fulmen_model_forward_multi(m, "", in4, 4, outs, 3, &count));
    EXPECT_WS(outs[0], 0.1522643147269264);
    EXPECT_WS(outs[1], 0.1088646205025725);
    EXPECT_WS(outs[2], -0.1122889430844225);
    free_all(outs, 3);

    /* Too small a capacity: the count comes back, nothing runs. */
    count = 0;
    CHECK_ERR(fulmen_model_forward_multi(m, NULL, in1, 1, outs, 2, &count), FULMEN_CODE_OUT_OF_RANGE, "capacity");
    CHECK(count == 3 && outs[0] == NULL);
    /* h0 without c0, lengths out of range, wrong feature size, too many inputs. */
    const fulmen_tensor *h_only[2] = {x, x};
    CHECK_ERR(fulmen_model_forward_multi(m, NULL, h_only, 2, outs, 3, &count), FULMEN_CODE_INVALID_ARGUMENT, "c0");
    const int64_t long_lens[2] = {3, 6};
    fulmen_tensor *too_long = NULL;
    CHECK_OK(fulmen_tensor_from_data(long_lens, sizeof long_lens, FULMEN_DTYPE_I64, d2, 1, &too_long));
    const fulmen_tensor *in_long[4] = {x, NULL, NULL, too_long};
    CHECK_ERR(fulmen_model_forward_multi(m, NULL, in_long, 4, outs, 3, &count), FULMEN_CODE_OUT_OF_RANGE, "lengths");
    const fulmen_tensor *wrong[1] = {y};
    CHECK_ERR(fulmen_model_forward_multi(m, NULL, wrong, 1, outs, 3, &count), FULMEN_CODE_SHAPE_MISMATCH, "input_size");
    const fulmen_tensor *many[17] = {x};
    CHECK_ERR(fulmen_model_forward_multi(m, NULL, many, 17, outs, 3, &count), FULMEN_CODE_INVALID_ARGUMENT,
              "FULMEN_MAX_FORWARD_INPUTS");
    CHECK_ERR(fulmen_model_forward_multi(m, "nope", in1, 1, outs, 3, &count), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK_ERR(fulmen_model_forward_multi(m, NULL, in1, 1, outs, 3, NULL), FULMEN_CODE_NULL_ARGUMENT, "count_out");
    CHECK(outs[0] == NULL);

    o.num_layers = 0;
    CHECK_ERR(fulmen_model_lstm_new(3, 4, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "num_layers");
    o.num_layers = INT64_MAX;
    CHECK_ERR(fulmen_model_lstm_new(3, 4, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "num_layers");
    o.num_layers = 1;
    o.dropout = 2;
    CHECK_ERR(fulmen_model_lstm_new(3, 4, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "dropout");
    CHECK_ERR(fulmen_model_lstm_new(3, INT64_MAX / 2, NULL, &bad), FULMEN_CODE_INVALID_ARGUMENT, "too large");
    CHECK(bad == NULL);
    fulmen_tensor *rest[] = {x, y, lengths, too_long};
    free_all(rest, 4);
    fulmen_model_free(m);
}

/* nn.GRU(3, 4) unbatched with h0, and nn.RNN(3, 4, 'relu', num_layers=2). */
static void test_gru_rnn(void) {
    fulmen_model *g = NULL, *r = NULL, *bad = NULL;
    CHECK_OK(fulmen_manual_seed(1));
    CHECK_OK(fulmen_model_gru_new(3, 4, NULL, &g));
    const int64_t d53[2] = {5, 3}, d14[2] = {1, 4}, d54[2] = {5, 4};
    fulmen_tensor *x = wave(d53, 2, 1.0f), *h0 = wave(d14, 2, 0.5f);
    fulmen_tensor *outs[2] = {NULL, NULL};
    size_t count = 0;
    const fulmen_tensor *in[2] = {x, h0};
    CHECK_OK(fulmen_model_forward_multi(g, NULL, in, 2, outs, 2, &count));
    CHECK(count == 2);
    EXPECT_SHAPE(outs[0], d54, 2);
    EXPECT_SHAPE(outs[1], d14, 2);
    EXPECT_WS(outs[0], -1.0001064737327396);
    EXPECT_WS(outs[1], -0.4241493446752429);
    free_all(outs, 2);
    /* Unbatched input takes no lengths. */
    const fulmen_tensor *in3[3] = {x, NULL, h0};
    CHECK_ERR(fulmen_model_forward_multi(g, NULL, in3, 3, outs, 2, &count), FULMEN_CODE_SHAPE_MISMATCH, "batched");

    fulmen_rnn_options o = fulmen_rnn_options_default();
    o.num_layers = 2;
    CHECK_OK(fulmen_manual_seed(2));
    CHECK_OK(fulmen_model_rnn_new(3, 4, FULMEN_ACTIVATION_RELU, &o, &r));
    const int64_t d523[3] = {5, 2, 3};
    fulmen_tensor *xb = wave(d523, 3, 1.0f);
    const fulmen_tensor *inb[1] = {xb};
    CHECK_OK(fulmen_model_forward_multi(r, NULL, inb, 1, outs, 2, &count));
    EXPECT_WS(outs[0], 4.8182306870818135);
    EXPECT_WS(outs[1], 1.5614675227552652);
    free_all(outs, 2);
    CHECK_ERR(fulmen_model_rnn_new(3, 4, FULMEN_ACTIVATION_GELU, NULL, &bad), FULMEN_CODE_INVALID_ARGUMENT, "TANH");
    CHECK(bad == NULL);
    fulmen_tensor *rest[] = {x, h0, xb};
    free_all(rest, 3);
    fulmen_model_free(g);
    fulmen_model_free(r);
}

/* nn.MultiheadAttention(4, 2, batch_first=True) after manual_seed(3): cross
 * attention with a key padding mask and an additive mask, then self. */
static void test_multihead_attention(void) {
    fulmen_model *a = NULL, *bad = NULL;
    CHECK_OK(fulmen_manual_seed(3));
    CHECK_OK(fulmen_model_multihead_attention_new(4, 2, 0.0, true, true, &a));
    static const char *const names[] = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
    expect_names(a, names, 4);
    const int64_t d234[3] = {2, 3, 4}, d254[3] = {2, 5, 4}, d35[2] = {3, 5}, d25[2] = {2, 5}, d235[3] = {2, 3, 5};
    fulmen_tensor *q = wave(d234, 3, 1.0f), *k0 = wave(d254, 3, 0.7f), *k = NULL, *v = NULL;
    CHECK_OK(fulmen_tensor_add_scalar(k0, 0.1, &k));
    /* value = cos(0.1 i). */
    float cv[40];
    for (int i = 0; i < 40; i++) cv[i] = cosf((float)i * 0.1f);
    v = check_f32(cv, 40, d254, 3);
    fulmen_tensor *am = wave(d35, 2, 0.3f), *kpm = NULL;
    const bool pad[10] = {false, false, false, true, true, false, false, false, false, false};
    CHECK_OK(fulmen_tensor_from_data(pad, sizeof pad, FULMEN_DTYPE_BOOL, d25, 2, &kpm));
    fulmen_tensor *outs[2] = {NULL, NULL};
    size_t count = 0;
    const fulmen_tensor *in0[3] = {q, k, v};
    CHECK_OK(fulmen_model_forward_multi(a, NULL, in0, 3, outs, 2, &count));
    EXPECT_WS(outs[0], 1.243497656347851);
    EXPECT_WS(outs[1], 2.898618086675803);
    free_all(outs, 2);
    const fulmen_tensor *in[5] = {q, k, v, kpm, am};
    CHECK_OK(fulmen_model_forward_multi(a, NULL, in, 5, outs, 2, &count));
    CHECK(count == 2);
    EXPECT_SHAPE(outs[0], d234, 3);
    EXPECT_SHAPE(outs[1], d235, 3);
    EXPECT_WS(outs[0], 1.0545948290576537);
    EXPECT_WS(outs[1], 2.805402169128259);
    free_all(outs, 2);
    fulmen_tensor *self = NULL;
    CHECK_OK(fulmen_model_forward(a, q, &self));
    EXPECT_WS(self, -2.1128816663598022);
    /* A mask of the wrong shape, a float mask of another dtype, no query. */
    const fulmen_tensor *bad_mask[5] = {q, k, v, am, NULL};
    CHECK_ERR(fulmen_model_forward_multi(a, NULL, bad_mask, 5, outs, 2, &count), FULMEN_CODE_SHAPE_MISMATCH,
              "key_padding_mask");
    const fulmen_tensor *no_query[2] = {NULL, k};
    CHECK_ERR(fulmen_model_forward_multi(a, NULL, no_query, 2, outs, 2, &count), FULMEN_CODE_INVALID_ARGUMENT,
              "query");
    CHECK_ERR(fulmen_model_multihead_attention_new(5, 2, 0.0, true, true, &bad), FULMEN_CODE_INVALID_ARGUMENT,
              "multiple");
    CHECK(bad == NULL && outs[0] == NULL);
    fulmen_tensor *rest[] = {q, k0, k, v, am, kpm, self};
    free_all(rest, 7);
    fulmen_model_free(a);
}

/* A bool [n, n] mask, true above the diagonal (keys after the query). */
static fulmen_tensor *causal_mask(int64_t n) {
    fulmen_tensor *ones = NULL, *upper = NULL, *mask = NULL;
    const int64_t d[2] = {n, n};
    CHECK_OK(fulmen_tensor_ones(d, 2, FULMEN_DTYPE_BOOL, &ones));
    CHECK_OK(fulmen_tensor_triu(ones, 1, &upper));
    mask = upper;
    fulmen_tensor_free(ones);
    return mask;
}

/* nn.TransformerEncoderLayer(8, 2, 16, dropout=0, activation='gelu',
 * batch_first=True) after manual_seed(4), with a causal mask and without;
 * nn.TransformerDecoderLayer(8, 2, 16, dropout=0, norm_first=True) after
 * manual_seed(5) with a causal target mask. */
static void test_transformer_layers(void) {
    fulmen_model *e = NULL, *d = NULL, *bad = NULL;
    fulmen_transformer_options o = fulmen_transformer_options_default();
    o.dim_feedforward = 16;
    o.dropout = 0;
    o.activation = FULMEN_ACTIVATION_GELU;
    o.batch_first = true;
    CHECK_OK(fulmen_manual_seed(4));
    CHECK_OK(fulmen_model_transformer_encoder_layer_new(8, 2, &o, &e));
    static const char *const enc[] = {
        "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
        "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
        "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
    };
    expect_names(e, enc, 12);
    const int64_t d248[3] = {2, 4, 8};
    fulmen_tensor *x = wave(d248, 3, 1.0f), *mask = causal_mask(4), *y = NULL;
    fulmen_tensor *outs[1] = {NULL};
    size_t count = 0;
    const fulmen_tensor *in[2] = {x, mask};
    CHECK_OK(fulmen_model_forward_multi(e, NULL, in, 2, outs, 1, &count));
    CHECK(count == 1);
    EXPECT_SHAPE(outs[0], d248, 3);
    EXPECT_WS(outs[0], 0.03431957324210089);
    fulmen_tensor_free(outs[0]);
    CHECK_OK(fulmen_model_forward(e, x, &y));
    EXPECT_WS(y, 0.037489470560103655);

    fulmen_transformer_options od = fulmen_transformer_options_default();
    od.dim_feedforward = 16;
    od.dropout = 0;
    od.norm_first = true;
    CHECK_OK(fulmen_manual_seed(5));
    CHECK_OK(fulmen_model_transformer_decoder_layer_new(8, 2, &od, &d));
    size_t len = 0;
    CHECK_OK(fulmen_model_state_dict_len(d, &len));
    CHECK(len == 18);
    const int64_t d428[3] = {4, 2, 8}, d328[3] = {3, 2, 8};
    fulmen_tensor *tgt = wave(d428, 3, 1.0f), *mem = NULL;
    float cv[48];
    for (int i = 0; i < 48; i++) cv[i] = cosf((float)i * 0.1f);
    mem = check_f32(cv, 48, d328, 3);
    const fulmen_tensor *din[3] = {tgt, mem, mask};
    CHECK_OK(fulmen_model_forward_multi(d, NULL, din, 3, outs, 1, &count));
    EXPECT_WS(outs[0], -13.226438738638535);
    fulmen_tensor_free(outs[0]);
    outs[0] = NULL;
    fulmen_tensor *z = NULL;
    CHECK_ERR(fulmen_model_forward(d, tgt, &z), FULMEN_CODE_INVALID_ARGUMENT, "memory");
    const fulmen_tensor *no_mem[1] = {tgt};
    CHECK_ERR(fulmen_model_forward_multi(d, NULL, no_mem, 1, outs, 1, &count), FULMEN_CODE_INVALID_ARGUMENT,
              "memory");
    o.activation = FULMEN_ACTIVATION_SOFTMAX;
    CHECK_ERR(fulmen_model_transformer_encoder_layer_new(8, 2, &o, &bad), FULMEN_CODE_INVALID_ARGUMENT, "softmax");
    CHECK_ERR(fulmen_model_transformer_encoder_layer_new(8, 3, NULL, &bad), FULMEN_CODE_INVALID_ARGUMENT, NULL);
    CHECK(bad == NULL && z == NULL && outs[0] == NULL);
    fulmen_tensor *rest[] = {x, mask, y, tgt, mem};
    free_all(rest, 5);
    fulmen_model_free(e);
    fulmen_model_free(d);
}

/* options.causal: the layers of test_transformer_layers built causal give
 * PyTorch's causal-mask results without a mask (SDPA's is_causal), with a
 * key padding mask as the explicit mask does, and refuse a mask. */
static void test_causal_transformer_layers(void) {
    fulmen_model *e = NULL, *plain = NULL, *d = NULL;
    fulmen_transformer_options o = fulmen_transformer_options_default();
    CHECK(!o.causal);
    o.dim_feedforward = 16;
    o.dropout = 0;
    o.activation = FULMEN_ACTIVATION_GELU;
    o.batch_first = true;
    o.causal = true;
    CHECK_OK(fulmen_manual_seed(4));
    CHECK_OK(fulmen_model_transformer_encoder_layer_new(8, 2, &o, &e));
    o.causal = false;
    CHECK_OK(fulmen_manual_seed(4));
    CHECK_OK(fulmen_model_transformer_encoder_layer_new(8, 2, &o, &plain));
    const int64_t d248[3] = {2, 4, 8}, d24[2] = {2, 4};
    fulmen_tensor *x = wave(d248, 3, 1.0f), *mask = causal_mask(4), *y = NULL, *kpm = NULL;
    CHECK_OK(fulmen_model_forward(e, x, &y));
    EXPECT_WS(y, 0.03431957324210089);
    const bool pad[8] = {false, false, false, true, false, false, false, false};
    CHECK_OK(fulmen_tensor_from_data(pad, sizeof pad, FULMEN_DTYPE_BOOL, d24, 2, &kpm));
    fulmen_tensor *outs[1] = {NULL}, *want[1] = {NULL};
    size_t count = 0;
    const fulmen_tensor *padded[3] = {x, NULL, kpm}, *explicit_mask[3] = {x, mask, kpm};
    CHECK_OK(fulmen_model_forward_multi(e, NULL, padded, 3, outs, 1, &count));
    CHECK_OK(fulmen_model_forward_multi(plain, NULL, explicit_mask, 3, want, 1, &count));
    CHECK(fabs(weighted_sum(outs[0]) - weighted_sum(want[0])) < 1e-6);
    free_all(outs, 1);
    free_all(want, 1);
    const fulmen_tensor *both[2] = {x, mask};
    CHECK_ERR(fulmen_model_forward_multi(e, NULL, both, 2, outs, 1, &count), FULMEN_CODE_INVALID_ARGUMENT,
              "src_mask");
    CHECK(outs[0] == NULL);

    fulmen_transformer_options od = fulmen_transformer_options_default();
    od.dim_feedforward = 16;
    od.dropout = 0;
    od.norm_first = true;
    od.causal = true;
    CHECK_OK(fulmen_manual_seed(5));
    CHECK_OK(fulmen_model_transformer_decoder_layer_new(8, 2, &od, &d));
    const int64_t d428[3] = {4, 2, 8}, d328[3] = {3, 2, 8};
    fulmen_tensor *tgt = wave(d428, 3, 1.0f), *mem = NULL;
    float cv[48];
    for (int i = 0; i < 48; i++) cv[i] = cosf((float)i * 0.1f);
    mem = check_f32(cv, 48, d328, 3);
    const fulmen_tensor *din[2] = {tgt, mem};
    CHECK_OK(fulmen_model_forward_multi(d, NULL, din, 2, outs, 1, &count));
    EXPECT_WS(outs[0], -13.226438738638535);
    free_all(outs, 1);
    const fulmen_tensor *dmask[3] = {tgt, mem, mask};
    CHECK_ERR(fulmen_model_forward_multi(d, NULL, dmask, 3, outs, 1, &count), FULMEN_CODE_INVALID_ARGUMENT,
              "tgt_mask");
    fulmen_tensor *rest[] = {x, mask, y, kpm, tgt, mem};
    free_all(rest, 6);
    fulmen_model_free(e);
    fulmen_model_free(plain);
    fulmen_model_free(d);
}

/* An LSTM between two layers of a named model, run by path, trains:
 * gradients reach its weights through the packed path. */
static void test_lstm_in_a_model_trains(void) {
    fulmen_model *root = NULL, *lstm = NULL;
    CHECK_OK(fulmen_model_named_new(&root));
    fulmen_rnn_options o = fulmen_rnn_options_default();
    o.batch_first = true;
    CHECK_OK(fulmen_model_lstm_new(3, 4, &o, &lstm));
    CHECK_OK(fulmen_model_add(root, "rnn", lstm));
    const int64_t d253[3] = {2, 5, 3}, d2[1] = {2}, lens[2] = {5, 2};
    fulmen_tensor *x = wave(d253, 3, 1.0f), *lengths = NULL, *loss = NULL, *grad = NULL;
    CHECK_OK(fulmen_tensor_from_data(lens, sizeof lens, FULMEN_DTYPE_I64, d2, 1, &lengths));
    fulmen_tensor *outs[3] = {NULL, NULL, NULL};
    size_t count = 0;
    const fulmen_tensor *in[4] = {x, NULL, NULL, lengths};
    CHECK_OK(fulmen_model_forward_multi(root, "rnn", in, 4, outs, 3, &count));
    CHECK_OK(fulmen_tensor_sum(outs[1], &loss));
    CHECK_OK(fulmen_tensor_backward(loss));
    fulmen_tensor *w = NULL;
    CHECK_OK(fulmen_model_state_dict_get(root, "rnn.weight_hh_l0", &w));
    CHECK_OK(fulmen_tensor_grad(w, &grad));
    CHECK(grad != NULL && fabs(weighted_sum(grad)) > 0);
    fulmen_tensor *rest[] = {x, lengths, loss, grad, w, outs[0], outs[1], outs[2]};
    free_all(rest, 8);
    fulmen_model_free(root); /* the LSTM handle was consumed by fulmen_model_add */
}

int main(void) {
    test_lstm();
    test_gru_rnn();
    test_multihead_attention();
    test_transformer_layers();
    test_causal_transformer_layers();
    test_lstm_in_a_model_trains();
    return check_finish("test_sequence_layers");
}
