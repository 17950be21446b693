/*
 * Numbers a resume reads from a checkpoint: a Lightning `.ckpt` whose
 * StepLR's base_lrs is [nan] (edited in the torch.save archive, the
 * record's CRC-32 recomputed so only the number is wrong) makes
 * fit(ckpt_path) fail with FULMEN_CODE_FORMAT naming base_lrs and the
 * file, and the model keeps its weights; so do an infinite base lr, a NaN
 * momentum and a -inf last lr. The same file unedited resumes.
 */
#define _POSIX_C_SOURCE 200809L

#include "check.h"
#include "fixture.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_root[64];

typedef struct {
    fulmen_model *model;
} world;

static fulmen_error *train_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **out) {
    (void)ctx;
    return fixture_cross_entropy(((world *)ud)->model, batch, out);
}

/* SGD with momentum and a StepLR halving the lr every epoch. */
static fulmen_error *configure(void *ud, fulmen_optimizer_config *config) {
    world *w = ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.lr = 0.05;
    o.momentum = 0.9;
    fulmen_optimizer *opt = NULL;
    fulmen_scheduler *sched = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(w->model, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &sched);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, sched, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) {
        fulmen_scheduler_free(sched);
        fulmen_optimizer_free(opt);
    }
    return e;
}

static fulmen_lightning_module *module_for(world *w) {
    fulmen_module_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.userdata = w;
    vt.training_step = train_step;
    vt.configure_optimizers = configure;
    fulmen_lightning_module *m = NULL;
    CHECK_OK(fulmen_lightning_module_new(&vt, w->model, &m));
    return m;
}

/* ---- the model's weights ---- */

/* Every state_dict tensor's values as f32, concatenated (malloc'd; *n bytes). */
static unsigned char *weights_of(const fulmen_model *m, size_t *n) {
    size_t count = 0, total = 0;
    CHECK_OK(fulmen_model_state_dict_len(m, &count));
    unsigned char *buf = NULL;
    for (size_t i = 0; i < count; i++) {
        char name[64];
        size_t len = 0, numel = 0;
        fulmen_tensor *t = NULL;
        CHECK_OK(fulmen_model_state_dict_name(m, i, name, sizeof name, &len));
        CHECK_OK(fulmen_model_state_dict_get(m, name, &t));
        CHECK_OK(fulmen_tensor_numel(t, &numel));
        unsigned char *grown = realloc(buf, total + numel * sizeof(float));
        if (grown == NULL) exit(2);
        buf = grown;
        CHECK_OK(fulmen_tensor_copy_to(t, FULMEN_DTYPE_F32, buf + total, numel * sizeof(float)));
        total += numel * sizeof(float);
        fulmen_tensor_free(t);
    }
    *n = total;
    return buf;
}

/* ---- editing a number in a torch.save archive ---- */

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) exit(2);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = len > 0 ? malloc((size_t)len) : NULL;
    if (b == NULL || fread(b, 1, (size_t)len, f) != (size_t)len) exit(2);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void write_all(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(b, 1, n, f) != n) exit(2);
    fclose(f);
}

static uint32_t get16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* zip's CRC-32. */
static uint32_t crc32_of(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

/* Recomputes the CRC-32 of the archive record whose data holds byte `at`,
 * in its local header and its central directory entry. */
static int fix_crc(unsigned char *b, size_t n, size_t at) {
    if (n < 22) return 0;
    size_t eocd = n - 22;
    while (eocd > 0 && get32(b + eocd) != 0x06054b50u) eocd--;
    if (get32(b + eocd) != 0x06054b50u) return 0;
    size_t entries = get16(b + eocd + 10), cd = get32(b + eocd + 16);
    for (size_t i = 0; i < entries && cd + 46 <= n; i++) {
        if (get32(b + cd) != 0x02014b50u) return 0;
        size_t size = get32(b + cd + 20), local = get32(b + cd + 42);
        size_t name = get16(b + cd + 28), extra = get16(b + cd + 30), comment = get16(b + cd + 32);
        if (local + 30 > n) return 0;
        size_t data = local + 30 + get16(b + local + 26) + get16(b + local + 28);
        if (data <= at && at < data + size && data + size <= n) {
            uint32_t crc = crc32_of(b + data, size);
            put32(b + local + 14, crc);
            put32(b + cd + 16, crc);
            return 1;
        }
        cd += 46 + name + extra + comment;
    }
    return 0;
}

/* Sets the first float pickled as the value of the str key `key` (or as
 * the first item of its list) to `value`: the key is BINUNICODE 'X', its
 * length and bytes, the list "](", the float BINFLOAT 'G' and 8 bytes big
 * endian. Returns whether it found it. */
static int edit_float(unsigned char *b, size_t n, const char *key, double value) {
    size_t klen = strlen(key);
    for (size_t i = 0; i + 5 + klen + 11 <= n; i++) {
        if (b[i] != 'X' || get32(b + i + 1) != klen || memcmp(b + i + 5, key, klen) != 0) continue;
        size_t at = i + 5 + klen;
        if (b[at] == ']' && b[at + 1] == '(') at += 2;
        if (b[at] != 'G') continue;
        uint64_t bits = 0;
        memcpy(&bits, &value, sizeof bits);
        for (int k = 0; k < 8; k++) b[at + 1 + k] = (unsigned char)(bits >> (56 - 8 * k));
        return fix_crc(b, n, at + 1);
    }
    return 0;
}

/* ---- the test ---- */

static void non_finite_numbers_are_refused_on_resume(void) {
    world w = {fixture_mlp(4, 0)};
    fulmen_lightning_module *m = module_for(&w);
    fulmen_dataset *ds = fixture_blobs(16, 2, 1.0f);
    fulmen_loader *l = fixture_loader(ds, 8, false, 0);
    fulmen_trainer *t = fixture_trainer(g_root, 2);
    CHECK_OK(fulmen_trainer_fit(t, m, l, NULL, NULL));
    char good[512];
    size_t len = 0;
    CHECK_OK(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, good, sizeof good, &len));
    fulmen_trainer_free(t);
    /* One more epoch, not saved: the model's weights now differ from the
     * checkpoint's, so a resume that loaded them before refusing shows. */
    fulmen_trainer *more = fixture_trainer(NULL, 1);
    CHECK_OK(fulmen_trainer_fit(more, m, l, NULL, NULL));
    fulmen_trainer_free(more);
    static const struct {
        const char *key;
        double value;
    } edits[] = {
        {"base_lrs", NAN},
        {"base_lrs", INFINITY},
        {"momentum", NAN},
        {"_last_lr", -INFINITY},
    };
    char bad[600];
    snprintf(bad, sizeof bad, "%s/edited.ckpt", g_root);
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        size_t n = 0;
        unsigned char *bytes = read_all(good, &n);
        int found = edit_float(bytes, n, edits[i].key, edits[i].value);
        CHECK(found);
        if (!found) fprintf(stderr, "  no float of %s in %s\n", edits[i].key, good);
        write_all(bad, bytes, n);
        free(bytes);
        size_t nw = 0, nb = 0;
        unsigned char *before = weights_of(w.model, &nw);
        fulmen_trainer *r = fixture_trainer(NULL, 3);
        fulmen_error *e = fulmen_trainer_fit(r, m, l, NULL, bad);
        const char *msg = e != NULL ? fulmen_error_message(e) : "accepted";
        int named = e != NULL && strstr(msg, edits[i].key) != NULL && strstr(msg, "edited.ckpt") != NULL;
        CHECK(fulmen_error_code(e) == FULMEN_CODE_FORMAT && named);
        if (fulmen_error_code(e) != FULMEN_CODE_FORMAT || !named) fprintf(stderr, "  %s: %s\n", edits[i].key, msg);
        fulmen_error_free(e);
        fulmen_trainer_free(r);
        unsigned char *after = weights_of(w.model, &nb);
        CHECK(nw == nb && nw > 0 && memcmp(before, after, nw) == 0);
        free(before);
        free(after);
    }
    unlink(bad);
    /* The file as written resumes. */
    fulmen_trainer *r = fixture_trainer(NULL, 3);
    CHECK_OK(fulmen_trainer_fit(r, m, l, NULL, good));
    fulmen_trainer_free(r);
    fulmen_lightning_module_free(m);
    fulmen_loader_free(l);
    fulmen_dataset_free(ds);
    fulmen_model_free(w.model);
}

int main(void) {
    CHECK_OK(fulmen_set_num_threads(1));
    snprintf(g_root, sizeof g_root, "/tmp/fulmen-test-ckpt-numbers-XXXXXX");
    CHECK(mkdtemp(g_root) != NULL);
    non_finite_numbers_are_refused_on_resume();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_root);
    CHECK(system(cmd) == 0);
    return check_finish("test_ckpt_numbers");
}
