/*
 * Fuzz target: the pickle reader of `torch.save` files. Each input is the
 * `data.pkl` record of an archive this target builds around it (stored
 * records with their CRC, beside a 64-byte float32 storage record "0"), so
 * mutations reach the unpickler instead of failing the zip checks. The
 * archive is loaded into a Linear(2, 2) with `fulmen_model_load` (not
 * strict): an error or a load, never a crash, a hang or a leaked handle;
 * on failure the weights are unchanged. The seeds are state_dict pickles
 * as `torch.save` writes them and a checkpoint-like nested dict.
 */
#define _XOPEN_SOURCE 700

#include "fulmen.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

const char *fuzz_target_name = "pickle";

static void check_error(fulmen_error *e) { fuzz_check_error_("pickle", e); }

/* A tensor of the storage "0" (16 floats): offset, size and stride. */
#define TENSOR(size, stride)                                                                                    \
    "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00" \
    "0X\x03\x00\x00\x00" "cpuK\x10tQK\x00" size stride "\x89" "ccollections\nOrderedDict\n)RtR"

static const char seed_state_dict[] = "\x80\x02" "ccollections\nOrderedDict\n)R(X\x06\x00\x00\x00weight" TENSOR(
    "(K\x02K\x02t", "(K\x02K\x01t") "X\x04\x00\x00\x00" "bias" TENSOR("(K\x02t", "(K\x01t") "u.";
static const char seed_checkpoint[] =
    "\x80\x02}(X\x05\x00\x00\x00" "epochK\x03X\x0a\x00\x00\x00state_dict}(X\x0c\x00\x00\x00model.weight" TENSOR(
        "(K\x02K\x02t", "(K\x02K\x01t") "X\x0a\x00\x00\x00model.bias" TENSOR("(K\x02t", "(K\x01t")
    "uX\x10\x00\x00\x00optimizer_states](}(X\x02\x00\x00\x00lrG?\xb9\x99\x99\x99\x99\x99\x9aX\x05\x00\x00\x00" "betas"
    "G?\xec\xcc\xcc\xcc\xcc\xcc\xcdG?\xef\xf7\xce\xd9\x16\x87+\x86X\x06\x00\x00\x00params](K\x00K\x01" "euaeN\x88u.";

void fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    add((const uint8_t *)seed_state_dict, sizeof seed_state_dict - 1);
    add((const uint8_t *)seed_checkpoint, sizeof seed_checkpoint - 1);
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static void put16(FILE *f, unsigned v) {
    fputc((int)(v & 0xFF), f);
    fputc((int)((v >> 8) & 0xFF), f);
}
static void put32(FILE *f, uint32_t v) {
    put16(f, v & 0xFFFF);
    put16(f, v >> 16);
}

/* The fields local and central headers share: version needed, flags,
 * method (stored), time, date, CRC, sizes and the name's length. */
static void put_entry(FILE *f, uint32_t crc, size_t size, const char *name) {
    put16(f, 20);
    put16(f, 0);
    put16(f, 0);
    put32(f, 0);
    put32(f, crc);
    put32(f, (uint32_t)size);
    put32(f, (uint32_t)size);
    put16(f, (unsigned)strlen(name));
}

/* Writes a stored zip of records `names[i]` holding `data[i]`. */
static void write_zip(FILE *f, const char *const *names, const uint8_t *const *data, const size_t *sizes, int n) {
    uint32_t offsets[2], crcs[2];
    for (int i = 0; i < n; i++) {
        offsets[i] = (uint32_t)ftell(f);
        crcs[i] = crc32_of(data[i], sizes[i]);
        put32(f, 0x04034b50);
        put_entry(f, crcs[i], sizes[i], names[i]);
        put16(f, 0); /* extra */
        fputs(names[i], f);
        if (sizes[i] > 0) fwrite(data[i], 1, sizes[i], f);
    }
    uint32_t cd = (uint32_t)ftell(f);
    for (int i = 0; i < n; i++) {
        put32(f, 0x02014b50);
        put16(f, 20); /* made by */
        put_entry(f, crcs[i], sizes[i], names[i]);
        put32(f, 0); /* extra, comment */
        put32(f, 0); /* disk, internal attributes */
        put32(f, 0); /* external attributes */
        put32(f, offsets[i]);
        fputs(names[i], f);
    }
    uint32_t cd_size = (uint32_t)ftell(f) - cd;
    put32(f, 0x06054b50);
    put32(f, 0);
    put16(f, (unsigned)n);
    put16(f, (unsigned)n);
    put32(f, cd_size);
    put32(f, cd);
    put16(f, 0);
}

static unsigned long inputs, loaded;

void fuzz_report(void) { printf("fuzz pickle: %lu inputs, %lu loaded\n", inputs, loaded); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    char path[96];
    snprintf(path, sizeof path, "/tmp/fulmen-fuzz-pickle-%d.pt", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    float storage[16];
    for (int i = 0; i < 16; i++) storage[i] = (float)i * 0.5f;
    const char *names[2] = {"archive/data.pkl", "archive/data/0"};
    const uint8_t *records[2] = {data, (const uint8_t *)storage};
    size_t sizes[2] = {size, sizeof storage};
    write_zip(f, names, records, sizes, 2);
    if (fclose(f) != 0) abort();

    size_t before = fulmen_live_handles();
    fulmen_model *m = NULL;
    fulmen_tensor *w0 = NULL, *w1 = NULL, *d = NULL, *a = NULL, *mx = NULL;
    if (fulmen_model_linear_new(2, 2, true, &m) != NULL) abort();
    if (fulmen_model_state_dict_get(m, "weight", &w0) != NULL) abort();
    if (fulmen_tensor_clone(w0, &w1) != NULL) abort();
    fulmen_error *e = fulmen_model_load(m, path, false);
    inputs++;
    if (check_error(e), e != NULL) {
        /* On failure the weights are unchanged. */
        fulmen_tensor *now = NULL;
        double v = 1;
        if (fulmen_model_state_dict_get(m, "weight", &now) != NULL) abort();
        if (fulmen_tensor_sub(now, w1, &d) != NULL || fulmen_tensor_abs(d, &a) != NULL ||
            fulmen_tensor_max(a, &mx) != NULL || fulmen_tensor_item(mx, &v) != NULL || v != 0) {
            fprintf(stderr, "fuzz pickle: a failed load changed the weights\n");
            abort();
        }
        fulmen_tensor_free(now);
    } else {
        loaded++;
    }
    fulmen_tensor_free(mx);
    fulmen_tensor_free(a);
    fulmen_tensor_free(d);
    fulmen_tensor_free(w1);
    fulmen_tensor_free(w0);
    fulmen_model_free(m);
    unlink(path);
    if (fulmen_live_handles() != before) {
        fprintf(stderr, "fuzz pickle: a handle leaked\n");
        abort();
    }
    return 0;
}
