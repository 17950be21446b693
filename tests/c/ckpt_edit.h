/*
 * Editing a safetensors file's JSON header in the C tests: read a
 * checkpoint, replace text in its header (any length), write it back with
 * the new header length. Tensor data offsets are relative to the end of
 * the header, so the file stays a valid safetensors file. Include after
 * check.h.
 */
#ifndef FULMEN_TEST_CKPT_EDIT_H
#define FULMEN_TEST_CKPT_EDIT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *header; /* NUL-terminated JSON */
    unsigned char *rest;
    size_t rest_len;
} ckpt_file;

/* Reads `path`; exits the test on a malformed file. */
static inline ckpt_file ckpt_read(const char *path) {
    ckpt_file c = {NULL, NULL, 0};
    FILE *f = fopen(path, "rb");
    if (f == NULL) exit(2);
    uint64_t n = 0;
    if (fread(&n, 8, 1, f) != 1 || n > (1u << 26)) exit(2);
    c.header = malloc(n + 1);
    if (c.header == NULL || fread(c.header, 1, n, f) != n) exit(2);
    c.header[n] = 0;
    long start = ftell(f);
    fseek(f, 0, SEEK_END);
    c.rest_len = (size_t)(ftell(f) - start);
    fseek(f, start, SEEK_SET);
    c.rest = malloc(c.rest_len + 1);
    if (c.rest == NULL || fread(c.rest, 1, c.rest_len, f) != c.rest_len) exit(2);
    fclose(f);
    return c;
}

/* Replaces every `from` in the header by `to`; returns how many. */
static inline int ckpt_replace(ckpt_file *c, const char *from, const char *to) {
    int count = 0;
    size_t fl = strlen(from), tl = strlen(to);
    for (char *p = strstr(c->header, from); p != NULL; p = strstr(p + fl, from)) count++;
    if (count == 0) return 0;
    size_t len = strlen(c->header) + (size_t)count * tl + 1;
    char *out = malloc(len), *w = out;
    const char *r = c->header;
    for (const char *p = strstr(r, from); p != NULL; p = strstr(r, from)) {
        memcpy(w, r, (size_t)(p - r));
        w += p - r;
        memcpy(w, to, tl);
        w += tl;
        r = p + fl;
    }
    strcpy(w, r);
    free(c->header);
    c->header = out;
    return count;
}

/* Writes the (edited) checkpoint to `path`. */
static inline void ckpt_write(const ckpt_file *c, const char *path) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) exit(2);
    uint64_t n = strlen(c->header);
    fwrite(&n, 8, 1, f);
    fwrite(c->header, 1, n, f);
    fwrite(c->rest, 1, c->rest_len, f);
    fclose(f);
}

static inline void ckpt_free(ckpt_file *c) {
    free(c->header);
    free(c->rest);
}

#endif
