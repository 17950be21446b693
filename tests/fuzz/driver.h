/*
 * The shared driver of fulmen's fuzz targets. A target defines
 * `LLVMFuzzerTestOneInput` (and optionally `fuzz_seeds`); built with
 * clang's `-fsanitize=fuzzer -DFULMEN_LIBFUZZER` it is a libFuzzer target,
 * otherwise this file gives it a `main` that
 *
 *   1. replays every file named on the command line (crash regressions and
 *      seed corpora: files or directories), then
 *   2. runs random inputs for FULMEN_FUZZ_SECONDS seconds (default 10):
 *      mutations of the seeds (bit flips, truncation, insertions, splices,
 *      overwritten length fields) or random bytes when there are no seeds.
 *
 * The random stream starts from FULMEN_FUZZ_SEED (default: the time) and the
 * seed is printed, so a run can be repeated. Under AddressSanitizer a crash
 * writes the input that caused it to build/fuzz/crash-<target>-<seed>.bin
 * before the process dies; copy it to tests/fuzz/regressions/<target>/ to
 * keep it as a regression test.
 */
#ifndef FULMEN_FUZZ_DRIVER_H
#define FULMEN_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Checks and frees an error a fulmen call returned (NULL is fine): a known
 * code (never a caught panic) and a message, else the target aborts (a
 * crash for the driver to save). Returns whether there was an error. */
#include "fulmen.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static inline int fuzz_check_error_(const char *target, fulmen_error *e) {
    if (e == NULL) return 0;
    int32_t code = fulmen_error_code(e);
    const char *msg = fulmen_error_message(e);
    if (code < 1 || code > FULMEN_CODE_OUT_OF_MEMORY || code == FULMEN_CODE_PANIC || msg == NULL || msg[0] == 0) {
        fprintf(stderr, "fuzz %s: bad error (code %d, message %s)\n", target, code, msg ? msg : "(null)");
        abort();
    }
    fulmen_error_free(e);
    return 1;
}

/* The folder fuzz_work_dir() made ("" before its first call). */
static inline char *fuzz_work_dir_path_(void) {
    static char path[64];
    return path;
}

static inline void fuzz_remove_work_dir_(void) {
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_work_dir_path_());
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_work_dir_path_());
}

/* A new folder of this process's own for the files a target writes
 * (mkdtemp under /tmp, made on the first call), removed with everything in
 * it when the process exits: two targets, two families of one source or
 * two runs at the same time never share a path, and a folder left by an
 * earlier run is never reused. Aborts when it cannot be made. */
static inline const char *fuzz_work_dir(void) {
    char *path = fuzz_work_dir_path_();
    if (path[0] == 0) {
        char made[] = "/tmp/fulmen-fuzz-XXXXXX";
        if (mkdtemp(made) == NULL) {
            perror("fuzz: mkdtemp");
            abort();
        }
        memcpy(path, made, sizeof made);
        atexit(fuzz_remove_work_dir_);
    }
    return path;
}

#ifndef FULMEN_LIBFUZZER

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The target's name, for messages and crash files. */
extern const char *fuzz_target_name;

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_HAVE_DEATH_CALLBACK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_HAVE_DEATH_CALLBACK 1
#endif
#endif
#ifdef FUZZ_HAVE_DEATH_CALLBACK
#include <sanitizer/common_interface_defs.h>
#endif

typedef struct {
    uint8_t *data;
    size_t size;
} fuzz_buf;

static fuzz_buf fuzz_current; /* the input being run, saved on a crash */
static uint64_t fuzz_seed_value;

static uint64_t fuzz_rng_state;

static uint64_t fuzz_rand(void) {
    /* xorshift64* */
    fuzz_rng_state ^= fuzz_rng_state >> 12;
    fuzz_rng_state ^= fuzz_rng_state << 25;
    fuzz_rng_state ^= fuzz_rng_state >> 27;
    return fuzz_rng_state * 0x2545F4914F6CDD1DULL;
}

static size_t fuzz_below(size_t n) { return n == 0 ? 0 : (size_t)(fuzz_rand() % n); }

static void fuzz_save_crash(void) {
    char path[256];
    mkdir("build", 0755);
    mkdir("build/fuzz", 0755);
    snprintf(path, sizeof path, "build/fuzz/crash-%s-%llu.bin", fuzz_target_name,
             (unsigned long long)fuzz_seed_value);
    FILE *f = fopen(path, "wb");
    if (f != NULL) {
        if (fuzz_current.size > 0) fwrite(fuzz_current.data, 1, fuzz_current.size, f);
        fclose(f);
        fprintf(stderr, "fuzz %s: the crashing input is in %s\n", fuzz_target_name, path);
    }
}

static int fuzz_run(const uint8_t *data, size_t size) {
    fuzz_current.data = (uint8_t *)data;
    fuzz_current.size = size;
    return LLVMFuzzerTestOneInput(data, size);
}

static fuzz_buf fuzz_read_file(const char *path) {
    fuzz_buf b = {NULL, 0};
    FILE *f = fopen(path, "rb");
    if (f == NULL) return b;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n > 0) {
        b.data = malloc((size_t)n);
        if (b.data != NULL && fread(b.data, 1, (size_t)n, f) == (size_t)n) b.size = (size_t)n;
    }
    fclose(f);
    return b;
}

/* Seeds: files given on the command line (directories are walked one level). */
typedef struct {
    fuzz_buf *items;
    size_t len, cap;
} fuzz_corpus;

static void fuzz_corpus_add(fuzz_corpus *c, fuzz_buf b) {
    if (b.data == NULL) return;
    if (c->len == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 16;
        c->items = realloc(c->items, c->cap * sizeof *c->items);
        if (c->items == NULL) exit(2);
    }
    c->items[c->len++] = b;
}

static void fuzz_corpus_load(fuzz_corpus *c, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
        fuzz_corpus_add(c, fuzz_read_file(path));
        return;
    }
    DIR *d = opendir(path);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        fuzz_corpus_add(c, fuzz_read_file(sub));
    }
    closedir(d);
}

/* A mutation of a random seed (or random bytes when there is none). */
static fuzz_buf fuzz_mutate(const fuzz_corpus *c) {
    fuzz_buf out;
    if (c->len == 0 || fuzz_below(16) == 0) {
        out.size = fuzz_below(256);
        out.data = malloc(out.size + 1);
        for (size_t i = 0; i < out.size; i++) out.data[i] = (uint8_t)fuzz_rand();
        return out;
    }
    const fuzz_buf *src = &c->items[fuzz_below(c->len)];
    size_t cap = src->size + 64;
    out.data = malloc(cap);
    memcpy(out.data, src->data, src->size);
    out.size = src->size;
    int rounds = 1 + (int)fuzz_below(4);
    for (int r = 0; r < rounds; r++) {
        switch (fuzz_below(7)) {
        case 0: /* flip bits */
            for (int k = 0; k < 1 + (int)fuzz_below(8) && out.size; k++)
                out.data[fuzz_below(out.size)] ^= (uint8_t)(1u << fuzz_below(8));
            break;
        case 1: /* truncate */
            out.size = fuzz_below(out.size + 1);
            break;
        case 2: /* insert random bytes */
            if (out.size + 16 <= cap) {
                size_t at = fuzz_below(out.size + 1), n = 1 + fuzz_below(16);
                memmove(out.data + at + n, out.data + at, out.size - at);
                for (size_t i = 0; i < n; i++) out.data[at + i] = (uint8_t)fuzz_rand();
                out.size += n;
            }
            break;
        case 3: /* delete a range */
            if (out.size) {
                size_t at = fuzz_below(out.size), n = 1 + fuzz_below(out.size - at);
                memmove(out.data + at, out.data + at + n, out.size - at - n);
                out.size -= n;
            }
            break;
        case 4: /* overwrite 8 bytes with an interesting number (length fields) */
            if (out.size >= 8) {
                static const uint64_t interesting[] = {0, 1, 7, 8, 0x7f, 0xff, 0x7fffffff, 0xffffffff,
                                                       0x7fffffffffffffffULL, 0xffffffffffffffffULL, 1u << 20};
                uint64_t v = interesting[fuzz_below(sizeof interesting / sizeof *interesting)];
                size_t at = fuzz_below(out.size - 7);
                memcpy(out.data + at, &v, 8);
            }
            break;
        case 5: /* splice another seed's tail */
            if (c->len > 1 && out.size) {
                const fuzz_buf *o = &c->items[fuzz_below(c->len)];
                size_t at = fuzz_below(out.size), from = fuzz_below(o->size + 1);
                size_t n = o->size - from;
                if (at + n > cap) n = cap - at;
                memcpy(out.data + at, o->data + from, n);
                out.size = at + n;
            }
            break;
        default: /* replace a byte with a delimiter-like character */
            if (out.size) {
                static const char special[] = ",;\n\r\"{}[]:0-e.\0";
                out.data[fuzz_below(out.size)] = (uint8_t)special[fuzz_below(sizeof special)];
            }
        }
    }
    return out;
}

/* A line a target may print after the run (what its inputs reached). */
void fuzz_report(void) __attribute__((weak));

/* Seeds a target may add programmatically (valid files made at start-up). */
void fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) __attribute__((weak));

static fuzz_corpus *fuzz_seed_sink;
static void fuzz_add_seed(const uint8_t *data, size_t size) {
    fuzz_buf b;
    b.data = malloc(size + 1);
    memcpy(b.data, data, size);
    b.size = size;
    fuzz_corpus_add(fuzz_seed_sink, b);
}

int main(int argc, char **argv) {
    fuzz_corpus corpus = {NULL, 0, 0};
    for (int i = 1; i < argc; i++) fuzz_corpus_load(&corpus, argv[i]);
    size_t replayed = corpus.len;
    const char *s = getenv("FULMEN_FUZZ_SEED");
    fuzz_seed_value = s != NULL ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
    fuzz_rng_state = fuzz_seed_value * 2654435761u + 1;
#ifdef FUZZ_HAVE_DEATH_CALLBACK
    __sanitizer_set_death_callback(fuzz_save_crash);
#endif
    for (size_t i = 0; i < corpus.len; i++) fuzz_run(corpus.items[i].data, corpus.items[i].size);
    fuzz_seed_sink = &corpus;
    if (fuzz_seeds) fuzz_seeds(fuzz_add_seed);
    const char *secs = getenv("FULMEN_FUZZ_SECONDS");
    double limit = secs != NULL ? atof(secs) : 10.0;
    time_t start = time(NULL);
    unsigned long runs = 0;
    while (difftime(time(NULL), start) < limit) {
        fuzz_buf b = fuzz_mutate(&corpus);
        fuzz_run(b.data, b.size);
        free(b.data);
        runs++;
    }
    fuzz_current.size = 0;
    printf("fuzz %s: %zu files replayed, %lu random inputs in %.0f s (FULMEN_FUZZ_SEED=%llu), no crash\n",
           fuzz_target_name, replayed, runs, limit, (unsigned long long)fuzz_seed_value);
    if (fuzz_report) fuzz_report();
    for (size_t i = 0; i < corpus.len; i++) free(corpus.items[i].data);
    free(corpus.items);
    return 0;
}

#endif /* FULMEN_LIBFUZZER */
#endif /* FULMEN_FUZZ_DRIVER_H */
