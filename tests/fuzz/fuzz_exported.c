/*
 * Fuzz target: torch.export archives (.pt2) to fulmen_model_load_exported.
 * An input is either
 *   - a whole archive (it starts with "PK"), written as it is: mutations
 *     of it reach the zip layer (offsets, sizes, CRCs); or
 *   - a recipe: its first byte picks a fixture (tests/fixtures/
 *     exported_{bn,tied,nograd}.pt2, read at start-up, or $FULMEN_FIXTURES),
 *     the rest is up to 8 edits, each an opcode byte and the bytes it
 *     reads, made to the archive's records before they are packed again as
 *     a stored zip with good CRCs, so that the edits reach the layers
 *     behind the zip:
 *       - the program JSON (models/<name>.json): byte flips, malformed
 *         JSON, a node's target replaced (an unknown operator, a
 *         higher-order one, Python's arithmetic, another node's), nodes
 *         swapped (a use before its definition), repeated (a value
 *         defined twice) or dropped, an argument or a result replaced by
 *         one of another kind (as_int, as_tensor, as_ints, as_graph,
 *         as_none, ...), numbers replaced by huge, negative or non-int64
 *         ones, values nested 10^4 deep, lists stretched to 10^5 items,
 *         and new nodes: Python's arithmetic on extreme ints (INT64_MIN //
 *         -1), ATen operators asked for 2^40-element results;
 *       - the weights config (data/weights/<name>_weights_config.json):
 *         sizes, strides and storage offsets past the file, negative,
 *         2^62, overflowing, dtype and layout codes out of range,
 *         path_name missing or "../x", entries dropped or renamed;
 *       - the stored tensors: truncated, emptied, dropped, refilled;
 *       - the pytree specs (in_spec / out_spec): children dropped or
 *         repeated (wrong leaf counts), unknown node types, dict keys that
 *         do not fit, nesting 10^4 deep, 65537 children;
 *       - the archive: records dropped, archive_format or byteorder
 *         changed, programs copied ("extra") or renamed, records in two
 *         folders, no records at all.
 * An archive that loads has its programs ("training_step", "forward",
 * "extra") called on good and bad arguments: a batch (x, y) of 3, 1 or 0
 * rows as a tuple or a list, x or int64 tokens alone, wrong dtypes, class
 * ids and token ids out of range, wrong nesting (a tuple of 1 or 3, a
 * tuple in a tuple, a dict, two arguments, none, an int, None, a string,
 * an empty list); what comes back is read and its first one-element tensor
 * backpropagated. fulmen_model_forward / forward_multi and the state_dict
 * are read too.
 *
 * Checked: no crash or sanitizer report; every error has a known code and
 * a message (never a caught panic); no handle leaked; a failed load writes
 * no model and never runs out of memory (nothing is allocated by a size
 * the file claims: under AddressSanitizer one allocation past 256 MiB
 * fails, see __asan_default_options, which libtorch reports as
 * FULMEN_CODE_OUT_OF_MEMORY and Rust as an abort); no input runs longer
 * than INPUT_SECONDS. A crash, a failed check or a timeout leaves the input
 * in build/fuzz/crash-exported-<seed>.bin.
 */
#define _XOPEN_SOURCE 700

#include "fulmen.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"
#include "../c/torch_zip.h"

const char *fuzz_target_name = "exported";

/* Under AddressSanitizer (how `make test` builds the fuzz targets) one
 * allocation past 256 MiB fails instead of taking the machine's memory:
 * a size read from the file and used before it is checked shows up as an
 * abort (Rust) or an out-of-memory error from the load (libtorch). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1:max_allocation_size_mb=256"; }

/* Most seconds one input may run. */
#define INPUT_SECONDS 60
/* Largest whole archive taken, and most recipe bytes read. */
#define RAW_LIMIT ((size_t)1 << 20)
#define RECIPE_LIMIT 4096
/* Most edits of one recipe. */
#define MAX_EDITS 8
/* Most bytes a stretched list or spec grows to. */
#define LONG_BYTES ((size_t)4 << 20)

static unsigned long inputs, whole, edits, loaded, calls, calls_ok;

void fuzz_report(void) {
    printf("fuzz exported: %lu archives (%lu whole, %lu recipes with %lu edits), %lu loaded, %lu program calls "
           "(%lu returned a value)\n",
           inputs, whole, inputs - whole, edits, loaded, calls, calls_ok);
}

/* ---- failures: the input is kept ---- */

#ifndef FULMEN_LIBFUZZER
static char crash_path[160];

/* Writes `s` to stderr (async-signal-safe). */
static void say(const char *s) {
    if (write(2, s, strlen(s)) < 0) return;
}

/* Writes the input being run to crash_path, with async-signal-safe calls
 * only: it runs in the handlers of SIGABRT (a failed check, a Rust
 * allocation failure) and SIGALRM (an input running too long), which
 * AddressSanitizer's death callback does not see. */
static void save_input(void) {
    if (crash_path[0] == 0) return;
    mkdir("build", 0755);
    mkdir("build/fuzz", 0755);
    int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    for (size_t done = 0; done < fuzz_current.size;) {
        ssize_t k = write(fd, fuzz_current.data + done, fuzz_current.size - done);
        if (k <= 0) break;
        done += (size_t)k;
    }
    close(fd);
    say("fuzz exported: the input is in ");
    say(crash_path);
    say("\n");
}

static void on_fatal_signal(int sig) {
    say(sig == SIGALRM ? "fuzz exported: an input ran too long\n" : "fuzz exported: aborted\n");
    save_input();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Starts the clock of one input (and, once, the handlers). */
static void watch(void) {
    if (crash_path[0] == 0) {
        snprintf(crash_path, sizeof crash_path, "build/fuzz/crash-%s-%llu.bin", fuzz_target_name,
                 (unsigned long long)fuzz_seed_value);
        signal(SIGABRT, on_fatal_signal);
        signal(SIGALRM, on_fatal_signal);
    }
    alarm(INPUT_SECONDS);
}

static void unwatch(void) { alarm(0); }
#else
static void watch(void) {}
static void unwatch(void) {}
#endif

/* A failed check: says what and aborts (the input is saved). */
static void fail(const char *what, const char *detail) {
    fprintf(stderr, "fuzz exported: %s (%s)\n", what, detail != NULL ? detail : "");
    abort();
}

/* Checks and frees an error (NULL is fine); returns whether there was one. */
static bool check_error(fulmen_error *e) { return fuzz_check_error_("exported", e) != 0; }

static void need(fulmen_error *e, const char *what) {
    if (e != NULL) {
        fprintf(stderr, "fuzz exported: set-up failed (%s): %s\n", what, fulmen_error_message(e));
        abort();
    }
}

static void *xmalloc(size_t n) {
    void *p = malloc(n > 0 ? n : 1);
    if (p == NULL) abort();
    return p;
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n > 0 ? n : 1);
    if (q == NULL) abort();
    return q;
}

static char *dup_n(const char *s, size_t n) {
    char *d = xmalloc(n + 1);
    if (n > 0) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static char *dup_s(const char *s) { return dup_n(s, strlen(s)); }

/* ---- a growing text ---- */

typedef struct {
    char *p;
    size_t len, cap;
} sb;

static void sb_grow(sb *b, size_t more) {
    if (b->len + more + 1 <= b->cap) return;
    size_t cap = b->cap > 0 ? b->cap : 256;
    while (cap < b->len + more + 1) cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static void sb_add(sb *b, const char *s, size_t n) {
    sb_grow(b, n);
    if (n > 0) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(sb *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_fmt(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) abort();
    sb_grow(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* `s` (n bytes) as the characters of a JSON string. */
static void sb_escaped(sb *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_add(b, e, 2);
        } else if (c < 0x20) {
            sb_fmt(b, "\\u%04x", (unsigned)c);
        } else {
            sb_add(b, s + i, 1);
        }
    }
}

/* The text the characters of a JSON string stand for (\" \\ \/ \b \f \n
 * \r \t, and \u escapes of ASCII; others become '?'), malloc'd. */
static char *json_unescape(const char *s, size_t n, size_t *out_len) {
    char *out = xmalloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            char e = s[++i];
            switch (e) {
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                unsigned v = 0;
                for (int d = 0; d < 4 && i + 1 < n; d++) {
                    char h = s[++i];
                    unsigned x = h >= 'a'   ? (unsigned)(h - 'a' + 10)
                                 : h >= 'A' ? (unsigned)(h - 'A' + 10)
                                            : (unsigned)(h - '0');
                    v = v * 16 + (x & 15u);
                }
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            default: c = e; break;
            }
        }
        out[k++] = c;
    }
    out[k] = 0;
    *out_len = k;
    return out;
}

/* ---- a JSON tree, enough to edit a document and write it back ---- */

enum { J_OBJ, J_ARR, J_STR, J_NUM, J_LIT, J_RAW };

typedef struct jv jv;
struct jv {
    int kind;
    /* J_STR: the characters between the quotes, escapes kept; J_NUM,
     * J_LIT (true, false, null, ...): the token; J_RAW: JSON text written
     * as it is */
    char *text;
    size_t len;
    size_t n, cap;
    char **keys; /* J_OBJ: the keys, escapes kept */
    jv **items;
};

/* Deepest nesting parsed (deeper edits are written as J_RAW text). */
#define JSON_MAX_DEPTH 200

static jv *jv_new(int kind) {
    jv *v = calloc(1, sizeof *v);
    if (v == NULL) abort();
    v->kind = kind;
    return v;
}

static jv *jv_text(int kind, const char *s, size_t n) {
    jv *v = jv_new(kind);
    v->text = dup_n(s, n);
    v->len = n;
    return v;
}

static jv *jv_raw(const char *s) { return jv_text(J_RAW, s, strlen(s)); }

/* A string whose characters (already escaped) are `s`. */
static jv *jv_str(const char *s) { return jv_text(J_STR, s, strlen(s)); }

/* J_RAW text taken from a growing text, which is emptied. */
static jv *jv_from_sb(sb *b) {
    jv *v = jv_text(J_RAW, b->p != NULL ? b->p : "", b->len);
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    return v;
}

static void jv_free(jv *v) {
    if (v == NULL) return;
    for (size_t i = 0; i < v->n; i++) {
        jv_free(v->items[i]);
        if (v->keys != NULL) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->text);
    free(v);
}

/* Puts `item` at `at` in the array or object `o` (an object's key is
 * `key`, taken; an array frees it). */
static void jv_insert(jv *o, size_t at, char *key, jv *item) {
    if (o->n == o->cap) {
        o->cap = o->cap > 0 ? o->cap * 2 : 8;
        o->items = xrealloc(o->items, o->cap * sizeof *o->items);
        if (o->kind == J_OBJ) o->keys = xrealloc(o->keys, o->cap * sizeof *o->keys);
    }
    if (at > o->n) at = o->n;
    memmove(o->items + at + 1, o->items + at, (o->n - at) * sizeof *o->items);
    if (o->kind == J_OBJ) {
        memmove(o->keys + at + 1, o->keys + at, (o->n - at) * sizeof *o->keys);
        o->keys[at] = key != NULL ? key : dup_s("fuzz");
    } else {
        free(key);
    }
    o->items[at] = item;
    o->n++;
}

static void jv_push(jv *o, char *key, jv *item) { jv_insert(o, o->n, key, item); }

/* Takes item `at` (< o->n) out of `o`; its key is freed. */
static jv *jv_take(jv *o, size_t at) {
    jv *item = o->items[at];
    memmove(o->items + at, o->items + at + 1, (o->n - at - 1) * sizeof *o->items);
    if (o->kind == J_OBJ) {
        free(o->keys[at]);
        memmove(o->keys + at, o->keys + at + 1, (o->n - at - 1) * sizeof *o->keys);
    }
    o->n--;
    return item;
}

static jv *jv_copy(const jv *v) {
    jv *c = jv_new(v->kind);
    if (v->text != NULL) {
        c->text = dup_n(v->text, v->len);
        c->len = v->len;
    }
    for (size_t i = 0; i < v->n; i++) jv_push(c, v->kind == J_OBJ ? dup_s(v->keys[i]) : NULL, jv_copy(v->items[i]));
    return c;
}

/* o[key], or NULL (also when o is NULL or not an object). */
static jv *jv_get(const jv *o, const char *key) {
    if (o == NULL || o->kind != J_OBJ) return NULL;
    for (size_t i = 0; i < o->n; i++) {
        if (strcmp(o->keys[i], key) == 0) return o->items[i];
    }
    return NULL;
}

/* o[key] = value (taken; freed when o is not an object). */
static void jv_set(jv *o, const char *key, jv *value) {
    if (o == NULL || o->kind != J_OBJ) {
        jv_free(value);
        return;
    }
    for (size_t i = 0; i < o->n; i++) {
        if (strcmp(o->keys[i], key) == 0) {
            jv_free(o->items[i]);
            o->items[i] = value;
            return;
        }
    }
    jv_push(o, dup_s(key), value);
}

static void jv_remove(jv *o, const char *key) {
    if (o == NULL || o->kind != J_OBJ) return;
    for (size_t i = 0; i < o->n; i++) {
        if (strcmp(o->keys[i], key) == 0) {
            jv_free(jv_take(o, i));
            return;
        }
    }
}

typedef struct {
    const char *s;
    size_t len, at;
} jp;

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static bool ends_token(char c) { return is_space(c) || c == ',' || c == ':' || c == ']' || c == '}'; }

static void jp_space(jp *p) {
    while (p->at < p->len && is_space(p->s[p->at])) p->at++;
}

/* The characters of the string at p->at (escapes kept), or NULL. */
static char *jp_string(jp *p, size_t *len) {
    if (p->at >= p->len || p->s[p->at] != '"') return NULL;
    size_t start = ++p->at;
    while (p->at < p->len && p->s[p->at] != '"') p->at += p->s[p->at] == '\\' ? 2 : 1;
    if (p->at >= p->len) return NULL;
    *len = p->at - start;
    p->at++;
    return dup_n(p->s + start, *len);
}

static jv *jp_value(jp *p, int depth) {
    jp_space(p);
    if (p->at >= p->len || depth > JSON_MAX_DEPTH) return NULL;
    char c = p->s[p->at];
    if (c == '"') {
        size_t len = 0;
        char *s = jp_string(p, &len);
        if (s == NULL) return NULL;
        jv *v = jv_new(J_STR);
        v->text = s;
        v->len = len;
        return v;
    }
    if (c != '{' && c != '[') {
        size_t start = p->at;
        while (p->at < p->len && !ends_token(p->s[p->at])) p->at++;
        if (p->at == start) return NULL;
        return jv_text(c == '-' || (c >= '0' && c <= '9') ? J_NUM : J_LIT, p->s + start, p->at - start);
    }
    jv *v = jv_new(c == '{' ? J_OBJ : J_ARR);
    char close = c == '{' ? '}' : ']';
    p->at++;
    jp_space(p);
    if (p->at < p->len && p->s[p->at] == close) {
        p->at++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        if (v->kind == J_OBJ) {
            size_t key_len = 0;
            jp_space(p);
            key = jp_string(p, &key_len);
            jp_space(p);
            if (key == NULL || p->at >= p->len || p->s[p->at] != ':') {
                free(key);
                jv_free(v);
                return NULL;
            }
            p->at++;
        }
        jv *item = jp_value(p, depth + 1);
        if (item == NULL) {
            free(key);
            jv_free(v);
            return NULL;
        }
        jv_push(v, key, item);
        jp_space(p);
        if (p->at < p->len && p->s[p->at] == ',') {
            p->at++;
            continue;
        }
        if (p->at < p->len && p->s[p->at] == close) {
            p->at++;
            return v;
        }
        jv_free(v);
        return NULL;
    }
}

/* The tree of the JSON document s[0..len), or NULL when it is not one. */
static jv *jv_parse(const char *s, size_t len) {
    jp p = {s, len, 0};
    jv *v = jp_value(&p, 0);
    if (v == NULL) return NULL;
    jp_space(&p);
    if (p.at != p.len) {
        jv_free(v);
        return NULL;
    }
    return v;
}

/* The tree of the JSON text in `b` (which is emptied), or the text as
 * J_RAW when it does not parse. */
static jv *jv_from_text(sb *b) {
    jv *v = jv_parse(b->p != NULL ? b->p : "", b->len);
    if (v == NULL) return jv_from_sb(b);
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    return v;
}

static void jv_write(const jv *v, sb *b) {
    switch (v->kind) {
    case J_OBJ:
    case J_ARR:
        sb_add(b, v->kind == J_OBJ ? "{" : "[", 1);
        for (size_t i = 0; i < v->n; i++) {
            if (i > 0) sb_add(b, ", ", 2);
            if (v->kind == J_OBJ) {
                sb_add(b, "\"", 1);
                sb_str(b, v->keys[i]);
                sb_add(b, "\": ", 3);
            }
            jv_write(v->items[i], b);
        }
        sb_add(b, v->kind == J_OBJ ? "}" : "]", 1);
        break;
    case J_STR:
        sb_add(b, "\"", 1);
        sb_add(b, v->text, v->len);
        sb_add(b, "\"", 1);
        break;
    default: sb_add(b, v->text, v->len); break;
    }
}

/* Places in a tree: item `at` of `parent`. */
typedef struct {
    jv *parent;
    size_t at;
} jslot;

typedef struct {
    jslot *v;
    size_t n, cap;
} jslots;

static void jslots_add(jslots *s, jv *parent, size_t at) {
    if (s->n == s->cap) {
        s->cap = s->cap > 0 ? s->cap * 2 : 64;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n].parent = parent;
    s->v[s->n].at = at;
    s->n++;
}

static jv **slot_ref(jslot s) { return &s.parent->items[s.at]; }

/* Every place below `v` holding a value of kind `kind` (-1: any) under
 * the key `key` (NULL: any key, and array items), in document order. */
static void jslots_find(jv *v, int kind, const char *key, jslots *out) {
    if (v->kind != J_OBJ && v->kind != J_ARR) return;
    for (size_t i = 0; i < v->n; i++) {
        jv *item = v->items[i];
        bool key_fits = key == NULL || (v->kind == J_OBJ && strcmp(v->keys[i], key) == 0);
        if (key_fits && (kind < 0 || item->kind == kind)) jslots_add(out, v, i);
        jslots_find(item, kind, key, out);
    }
}

/* Replaces the value at `s` by `v` (taken). */
static void jslot_put(jslot s, jv *v) {
    jv **ref = slot_ref(s);
    jv_free(*ref);
    *ref = v;
}

/* ---- archives: records under one folder ---- */

typedef struct {
    /* below the archive's folder; a name starting with '!' is written as
     * it is (without the '!') */
    char *name;
    uint8_t *data; /* never NULL */
    size_t size;
} record;

typedef struct {
    char prefix[64];
    record r[TORCH_ZIP_MAX_RECORDS];
    int n;
} archive;

/* Adds a copy of a record; -1 when the archive is full. */
static int archive_add(archive *a, const char *name, const void *data, size_t size) {
    if (a->n >= TORCH_ZIP_MAX_RECORDS) return -1;
    record *r = &a->r[a->n];
    r->name = dup_s(name);
    r->data = xmalloc(size);
    if (size > 0) memcpy(r->data, data, size);
    r->size = size;
    return a->n++;
}

static void archive_remove(archive *a, int i) {
    free(a->r[i].name);
    free(a->r[i].data);
    memmove(a->r + i, a->r + i + 1, (size_t)(a->n - i - 1) * sizeof *a->r);
    a->n--;
}

static void archive_free(archive *a) {
    while (a->n > 0) archive_remove(a, a->n - 1);
}

static void archive_copy(archive *dst, const archive *src) {
    memset(dst, 0, sizeof *dst);
    memcpy(dst->prefix, src->prefix, sizeof dst->prefix);
    for (int i = 0; i < src->n; i++) archive_add(dst, src->r[i].name, src->r[i].data, src->r[i].size);
}

static int find_record(const archive *a, const char *name) {
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->r[i].name, name) == 0) return i;
    }
    return -1;
}

static void record_set(record *r, const void *data, size_t size) {
    uint8_t *d = xmalloc(size);
    if (size > 0) memcpy(d, data, size);
    free(r->data);
    r->data = d;
    r->size = size;
}

/* Puts n bytes at `at` (<= size) into the record. */
static void record_insert(record *r, size_t at, const void *bytes, size_t n) {
    r->data = xrealloc(r->data, r->size + n);
    memmove(r->data + at + n, r->data + at, r->size - at);
    memcpy(r->data + at, bytes, n);
    r->size += n;
}

static void record_put_json(record *r, const jv *doc) {
    sb b = {NULL, 0, 0};
    jv_write(doc, &b);
    free(r->data);
    r->data = (uint8_t *)b.p;
    r->size = b.len;
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t rd16(const uint8_t *p) { return (size_t)p[0] | (size_t)p[1] << 8; }

/* Reads the zip of stored records z[0..n) into `a`, but the sample inputs
 * and the serialization id, which the loader never reads. Returns 0, or
 * -1 when it is not a zip of stored records under one folder. */
static int archive_parse(archive *a, const uint8_t *z, size_t n) {
    memset(a, 0, sizeof *a);
    if (n < 22) return -1;
    size_t end = n - 22;
    while (rd32(z + end) != 0x06054b50u) {
        if (end == 0) return -1;
        end--;
    }
    size_t count = rd16(z + end + 10), at = rd32(z + end + 16);
    for (size_t i = 0; i < count; i++) {
        if (at > n || n - at < 46 || rd32(z + at) != 0x02014b50u || rd16(z + at + 10) != 0) return -1;
        size_t size = rd32(z + at + 20), name_len = rd16(z + at + 28), local = rd32(z + at + 42);
        size_t next = at + 46 + name_len + rd16(z + at + 30) + rd16(z + at + 32);
        if (n - at < 46 + name_len || local > n || n - local < 30) return -1;
        size_t body = local + 30 + rd16(z + local + 26) + rd16(z + local + 28);
        if (body > n || size > n - body) return -1;
        const char *name = (const char *)z + at + 46;
        const char *slash = memchr(name, '/', name_len);
        if (slash == NULL || (size_t)(slash - name) >= sizeof a->prefix) return -1;
        size_t top = (size_t)(slash - name);
        if (a->prefix[0] == 0) memcpy(a->prefix, name, top);
        char *rest = dup_n(slash + 1, name_len - top - 1);
        bool unread = strncmp(rest, "data/sample_inputs/", 19) == 0 || strcmp(rest, ".data/serialization_id") == 0;
        int added = unread ? 0 : archive_add(a, rest, z + body, size);
        free(rest);
        if (added < 0) return -1;
        at = next;
    }
    return 0;
}

/* Writes the archive as a zip of stored records with their CRCs. */
static int archive_write(const archive *a, const char *path) {
    const char *names[TORCH_ZIP_MAX_RECORDS];
    const uint8_t *data[TORCH_ZIP_MAX_RECORDS];
    size_t sizes[TORCH_ZIP_MAX_RECORDS];
    char *full[TORCH_ZIP_MAX_RECORDS];
    for (int i = 0; i < a->n; i++) {
        sb b = {NULL, 0, 0};
        if (a->r[i].name[0] == '!') {
            sb_str(&b, a->r[i].name + 1);
        } else {
            sb_fmt(&b, "%s/%s", a->prefix, a->r[i].name);
        }
        full[i] = b.p;
        names[i] = b.p;
        data[i] = a->r[i].data;
        sizes[i] = a->r[i].size;
    }
    int rc = -1;
    FILE *f = fopen(path, "wb");
    if (f != NULL) {
        torch_zip_write(f, names, data, sizes, a->n);
        rc = fclose(f) == 0 ? 0 : -1;
    }
    for (int i = 0; i < a->n; i++) free(full[i]);
    return rc;
}

/* ---- recipes ---- */

typedef struct {
    const uint8_t *p;
    size_t n;
} input;

typedef struct {
    archive a;
    input in;
    int fresh; /* names of the values new nodes define: fuzz_<k> */
} recipe;

static unsigned byte(input *in) {
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

/* 0..n-1 from two bytes (0 when n is 0). */
static size_t pick(input *in, size_t n) {
    size_t hi = byte(in);
    size_t lo = byte(in);
    return n == 0 ? 0 : ((hi << 8) | lo) % n;
}

static const char *choose(input *in, const char *const *table, size_t n) { return table[byte(in) % n]; }

#define CHOOSE(in, table) choose((in), (table), sizeof(table) / sizeof *(table))

/* Numbers for any JSON field: small, boundaries, huge, negative, past
 * int64, not integers. */
static const char *const numbers[] = {"0",
                                      "1",
                                      "-1",
                                      "2",
                                      "3",
                                      "-2",
                                      "64",
                                      "65",
                                      "129",
                                      "65536",
                                      "2147483647",
                                      "2147483648",
                                      "4294967296",
                                      "1099511627776",
                                      "-1099511627776",
                                      "4611686018427387904",
                                      "4611686018427387905",
                                      "9223372036854775807",
                                      "-9223372036854775807",
                                      "-9223372036854775808",
                                      "9223372036854775808",
                                      "18446744073709551616",
                                      "-9223372036854775809",
                                      "1e300",
                                      "1e400",
                                      "-0",
                                      "0.5",
                                      "1.5"};

/* Integers for sizes, counts and arithmetic, within int64 but the last. */
static const char *const ints[] = {"0",
                                   "1",
                                   "-1",
                                   "2",
                                   "3",
                                   "-2",
                                   "64",
                                   "4096",
                                   "65536",
                                   "2147483648",
                                   "4294967296",
                                   "1099511627776",
                                   "-1099511627776",
                                   "4611686018427387904",
                                   "9223372036854775807",
                                   "-9223372036854775808",
                                   "9223372036854775808"};

/* dtype, layout and memory format codes, most out of range. */
static const char *const codes[] = {"-1", "0", "1", "4", "5", "6", "7", "9", "12", "13", "14", "99", "1099511627776",
                                    "\"7\""};

/* A number from the table, or now and then eight raw bytes. */
static const char *a_number(input *in, char buf[32]) {
    unsigned b = byte(in);
    if (b < 240) return numbers[b % (sizeof numbers / sizeof *numbers)];
    uint64_t u = 0;
    for (int i = 0; i < 8; i++) u = u << 8 | byte(in);
    int64_t v;
    memcpy(&v, &u, sizeof v);
    snprintf(buf, 32, "%" PRId64, v);
    return buf;
}

static bool starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static bool ends(const char *s, const char *p) {
    size_t n = strlen(s), k = strlen(p);
    return n >= k && strcmp(s + n - k, p) == 0;
}

static bool is_program(const char *n) { return starts(n, "models/") && ends(n, ".json"); }
static bool is_weights_config(const char *n) { return starts(n, "data/weights/") && ends(n, "_config.json"); }
static bool is_json(const char *n) { return ends(n, ".json"); }
static bool is_tensor_file(const char *n) {
    return (starts(n, "data/weights/") || starts(n, "data/constants/")) && !ends(n, ".json");
}

/* A record `want` accepts, or -1. */
static int pick_record(recipe *r, bool (*want)(const char *)) {
    int idx[TORCH_ZIP_MAX_RECORDS], k = 0;
    for (int i = 0; i < r->a.n; i++) {
        if (want(r->a.r[i].name)) idx[k++] = i;
    }
    size_t at = pick(&r->in, (size_t)k);
    return k == 0 ? -1 : idx[at];
}

/* Runs `edit` on the JSON of a record `want` picks, and writes the tree
 * back when `edit` changed it (returned true). */
static void on_json(recipe *r, bool (*want)(const char *), bool (*edit)(recipe *, jv *, const char *)) {
    int i = pick_record(r, want);
    if (i < 0) return;
    jv *doc = jv_parse((const char *)r->a.r[i].data, r->a.r[i].size);
    if (doc == NULL) return;
    if (edit(r, doc, r->a.r[i].name)) record_put_json(&r->a.r[i], doc);
    jv_free(doc);
}

/* A node list of a program (its graph's, mostly, or a subgraph's). */
static jv *pick_node_list(jv *doc, input *in) {
    jslots lists = {NULL, 0, 0};
    jslots_find(doc, J_ARR, "nodes", &lists);
    jv *list = NULL;
    if (lists.n > 0) {
        size_t k = byte(in) % 2 == 0 ? 0 : pick(in, lists.n);
        list = *slot_ref(lists.v[k]);
    }
    free(lists.v);
    return list;
}

/* A node (an object) of a program, or NULL. */
static jv *pick_node(jv *doc, input *in) {
    jv *list = pick_node_list(doc, in);
    if (list == NULL || list->n == 0) return NULL;
    jv *node = list->items[pick(in, list->n)];
    return node->kind == J_OBJ ? node : NULL;
}

/* A value name for a new argument: mostly one the program's graph
 * mentions (a tensor, a symbol, an argument's name), now and then one it
 * never defines; never one a new node defined. Malloc'd. */
static char *a_name(jv *doc, input *in) {
    jslots s = {NULL, 0, 0};
    jslots_find(doc, J_STR, "name", &s);
    jslots_find(doc, J_STR, "as_name", &s);
    size_t k = pick(in, s.n + s.n / 8 + 1);
    char *name = NULL;
    if (k < s.n) {
        const jv *v = *slot_ref(s.v[k]);
        if (v->len > 0 && strncmp(v->text, "fuzz_", 5) != 0) name = dup_n(v->text, v->len);
    }
    free(s.v);
    return name != NULL ? name : dup_s("no_such_value");
}

static jv *as_int(const char *v) {
    sb b = {NULL, 0, 0};
    sb_fmt(&b, "{\"as_int\": %s}", v);
    return jv_from_text(&b);
}

/* [{"as_int": v}, ...] of d items. */
static jv *int_list(unsigned d, const char *v) {
    sb b = {NULL, 0, 0};
    sb_str(&b, "[");
    for (unsigned k = 0; k < d; k++) sb_fmt(&b, "%s{\"as_int\": %s}", k > 0 ? ", " : "", v);
    sb_str(&b, "]");
    return jv_from_text(&b);
}

static const char *const odd_args[] = {"{\"as_custom_obj\": {\"name\": \"x\", \"class_fqn\": \"y\"}}",
                                       "{\"as_operator\": \"aten.add.Tensor\"}",
                                       "{\"as_int\": 1, \"as_float\": 2.0}",
                                       "{\"as_int\": null}",
                                       "{\"as_none\": null}",
                                       "{\"as_sym_int\": {\"as_expr\": 1}}",
                                       "{\"as_complex\": {\"real\": 1, \"imag\": 2}}",
                                       "{\"as_ints\": [1, \"2\"]}",
                                       "{\"as_tensor\": {}}",
                                       "{\"as_tensor\": {\"name\": 7}}",
                                       "{}",
                                       "42",
                                       "[]",
                                       "null",
                                       "\"as_int\""};

static const char *const floats[] = {"\"NaN\"", "\"Infinity\"", "\"-Infinity\"", "1e308", "-0.0", "0.5", "\"x\"", "7"};

/* Characters of JSON strings (escaped). */
static const char *const strings[] = {"",
                                      "x",
                                      "../x",
                                      "..",
                                      "/etc/passwd",
                                      "a/b",
                                      ".data",
                                      "weight_999",
                                      "model",
                                      "forward",
                                      "l.missing",
                                      "torch.ops.aten.linear.default",
                                      "\\u0000",
                                      "\\ud800",
                                      "caf\\u00e9",
                                      "\\\\",
                                      "builtins.dict",
                                      "[]"};

/* An argument of a kind fit for the node or not, now and then a copy of
 * one of the program's subgraphs. */
static jv *new_arg(input *in, jv *doc) {
    char num[32];
    char *name = a_name(doc, in);
    sb b = {NULL, 0, 0};
    switch (byte(in) % 22) {
    case 0: sb_str(&b, "{\"as_none\": true}"); break;
    case 1: sb_fmt(&b, "{\"as_int\": %s}", a_number(in, num)); break;
    case 2: {
        unsigned k = byte(in) % 4;
        sb_str(&b, "{\"as_ints\": [");
        for (unsigned i = 0; i < k; i++) sb_fmt(&b, "%s%s", i > 0 ? ", " : "", a_number(in, num));
        sb_str(&b, "]}");
        break;
    }
    case 3: sb_fmt(&b, "{\"as_tensor\": {\"name\": \"%s\"}}", name); break;
    case 4: sb_fmt(&b, "{\"as_tensors\": [{\"name\": \"%s\"}, {\"name\": \"%s\"}]}", name, name); break;
    case 5: {
        jslots g = {NULL, 0, 0};
        jslots_find(doc, J_OBJ, "as_graph", &g);
        if (g.n > 0 && byte(in) % 2 == 0) {
            jv *o = jv_new(J_OBJ);
            jv_push(o, dup_s("as_graph"), jv_copy(*slot_ref(g.v[pick(in, g.n)])));
            free(g.v);
            free(name);
            return o;
        }
        free(g.v);
        sb_str(&b, "{\"as_graph\": {\"name\": \"g\", \"graph\": {\"inputs\": [], \"outputs\": [], \"nodes\": []}}}");
        break;
    }
    case 6: sb_fmt(&b, "{\"as_float\": %s}", CHOOSE(in, floats)); break;
    case 7: {
        const char *f = CHOOSE(in, floats);
        sb_fmt(&b, "{\"as_floats\": [%s, %s]}", f, CHOOSE(in, floats));
        break;
    }
    case 8: sb_str(&b, "{\"as_bool\": true}"); break;
    case 9: sb_str(&b, byte(in) % 2 ? "{\"as_bools\": [true, false]}" : "{\"as_bools\": [true, 1]}"); break;
    case 10: sb_fmt(&b, "{\"as_string\": \"%s\"}", CHOOSE(in, strings)); break;
    case 11: sb_fmt(&b, "{\"as_sym_int\": {\"as_name\": \"%s\"}}", name); break;
    case 12: sb_fmt(&b, "{\"as_sym_int\": {\"as_int\": %s}}", a_number(in, num)); break;
    case 13: {
        const char *v = a_number(in, num);
        const char *more = byte(in) % 4 == 0 ? ", {\"as_float\": 1.5}" : "";
        sb_fmt(&b, "{\"as_sym_ints\": [{\"as_name\": \"%s\"}, {\"as_int\": %s}%s]}", name, v, more);
        break;
    }
    case 14: sb_fmt(&b, "{\"as_scalar_type\": %s}", CHOOSE(in, codes)); break;
    case 15: sb_fmt(&b, "{\"as_layout\": %s}", CHOOSE(in, codes)); break;
    case 16: sb_fmt(&b, "{\"as_memory_format\": %s}", CHOOSE(in, codes)); break;
    case 17: sb_str(&b, "{\"as_device\": {\"type\": \"cuda\", \"index\": 7}}"); break;
    case 18:
        sb_fmt(&b, "{\"as_optional_tensors\": [{\"as_none\": true}, {\"as_tensor\": {\"name\": \"%s\"}}]}", name);
        break;
    case 19: sb_fmt(&b, "{\"as_optional_tensor\": {\"as_tensor\": {\"name\": \"%s\"}}}", name); break;
    case 20: sb_fmt(&b, "{\"as_sym_bool\": {\"as_name\": \"%s\"}}", name); break;
    default: sb_str(&b, CHOOSE(in, odd_args)); break;
    }
    free(name);
    return jv_from_text(&b);
}

/* -- edits of any JSON record -- */

static void edit_flip(recipe *r) {
    int i = pick_record(r, is_json);
    if (i < 0) return;
    record *rec = &r->a.r[i];
    unsigned k = 1 + byte(&r->in) % 8;
    for (unsigned j = 0; j < k && rec->size > 0; j++) {
        size_t at = pick(&r->in, rec->size);
        rec->data[at] ^= (uint8_t)(1u << (byte(&r->in) % 8));
    }
}

static const char *const broken[] = {"",
                                     "null",
                                     "[]",
                                     "{}",
                                     "{",
                                     "\"x\"",
                                     "{\"graph_module\": 1}",
                                     "{\"graph_module\": {\"graph\": null}}",
                                     "{\"config\": []}",
                                     "{\"config\": {\"w\": null}}",
                                     "\xff\xfe"};

/* Malformed JSON: cut, a character lost or added, a stray document. */
static void edit_break(recipe *r) {
    int i = pick_record(r, is_json);
    if (i < 0) return;
    record *rec = &r->a.r[i];
    size_t at = pick(&r->in, rec->size + 1);
    switch (byte(&r->in) % 5) {
    case 0: rec->size = at; break;
    case 1:
        if (at < rec->size) {
            memmove(rec->data + at, rec->data + at + 1, rec->size - at - 1);
            rec->size--;
        }
        break;
    case 2: {
        static const char marks[] = "{}[],:\"\\";
        record_insert(rec, at, &marks[byte(&r->in) % (sizeof marks - 1)], 1);
        break;
    }
    case 3: {
        const char *s = CHOOSE(&r->in, broken);
        record_set(rec, s, strlen(s));
        break;
    }
    default:
        if (at < rec->size) rec->data[at] = byte(&r->in) % 2 ? 0x00 : 0xff;
        break;
    }
}

/* Swaps, repeats or drops items of a list: a node list (a use before
 * its definition, a value defined twice, a value never defined) or any
 * list of the document (inputs, outputs, specs, sizes). */
static bool list_in(recipe *r, jv *doc, const char *name) {
    input *in = &r->in;
    unsigned how = byte(in);
    jv *list = NULL;
    if (how % 2 == 0 && is_program(name)) {
        list = pick_node_list(doc, in);
    } else {
        jslots s = {NULL, 0, 0};
        jslots_find(doc, J_ARR, NULL, &s);
        if (s.n > 0) list = *slot_ref(s.v[pick(in, s.n)]);
        free(s.v);
    }
    if (list == NULL || list->n == 0) return false;
    size_t a = pick(in, list->n), b = pick(in, list->n);
    switch ((how / 2) % 3) {
    case 0: {
        jv *t = list->items[a];
        list->items[a] = list->items[b];
        list->items[b] = t;
        break;
    }
    case 1: jv_insert(list, b, NULL, jv_copy(list->items[a])); break;
    default: jv_free(jv_take(list, a)); break;
    }
    return true;
}

static void edit_list(recipe *r) { on_json(r, is_json, list_in); }

static bool number_in(recipe *r, jv *doc, const char *name) {
    (void)name;
    jslots s = {NULL, 0, 0};
    jslots_find(doc, J_NUM, NULL, &s);
    bool changed = s.n > 0;
    if (changed) {
        jslot at = s.v[pick(&r->in, s.n)];
        char num[32];
        const char *t = a_number(&r->in, num);
        jslot_put(at, jv_text(J_NUM, t, strlen(t)));
    }
    free(s.v);
    return changed;
}

/* A number replaced: sizes, dims, dtype codes, argument kinds... */
static void edit_number(recipe *r) { on_json(r, is_json, number_in); }

static bool string_in(recipe *r, jv *doc, const char *name) {
    (void)name;
    input *in = &r->in;
    jslots s = {NULL, 0, 0};
    jslots_find(doc, J_STR, NULL, &s);
    bool changed = s.n > 0;
    if (changed) {
        jslot at = s.v[pick(in, s.n)];
        const jv *old = *slot_ref(at);
        sb b = {NULL, 0, 0};
        switch (byte(in) % 4) {
        case 0: sb_str(&b, CHOOSE(in, strings)); break;
        case 1:
            /* "l.weight" -> "l.weightx": a name nothing else uses */
            sb_add(&b, old->text, old->len);
            sb_str(&b, "x");
            break;
        case 2: {
            const jv *other = *slot_ref(s.v[pick(in, s.n)]);
            sb_add(&b, other->text, other->len);
            break;
        }
        default: {
            size_t n = byte(in) % 2 ? 4096 : 100000;
            for (size_t k = 0; k < n; k++) sb_add(&b, "a", 1);
            break;
        }
        }
        jslot_put(at, jv_text(J_STR, b.p != NULL ? b.p : "", b.len));
        free(b.p);
    }
    free(s.v);
    return changed;
}

/* A string replaced: names, targets, paths, specs. */
static void edit_string(recipe *r) { on_json(r, is_json, string_in); }

static bool deep_in(recipe *r, jv *doc, const char *name) {
    (void)name;
    jslots s = {NULL, 0, 0};
    jslots_find(doc, -1, NULL, &s);
    bool changed = s.n > 0;
    if (changed) {
        static const size_t depths[] = {129, 1000, 10000};
        jslot at = s.v[pick(&r->in, s.n)];
        size_t d = depths[byte(&r->in) % 3];
        bool objects = byte(&r->in) % 2 == 0;
        sb b = {NULL, 0, 0};
        for (size_t k = 0; k < d; k++) sb_str(&b, objects ? "{\"a\": " : "[");
        sb_str(&b, "0");
        for (size_t k = 0; k < d; k++) sb_str(&b, objects ? "}" : "]");
        jslot_put(at, jv_from_sb(&b));
    }
    free(s.v);
    return changed;
}

/* A value replaced by JSON nested 129 to 10^4 deep. */
static void edit_deep(recipe *r) { on_json(r, is_json, deep_in); }

static bool long_in(recipe *r, jv *doc, const char *name) {
    (void)name;
    jslots s = {NULL, 0, 0};
    jslots_find(doc, J_ARR, NULL, &s);
    bool changed = s.n > 0;
    if (changed) {
        jslot at = s.v[pick(&r->in, s.n)];
        const jv *list = *slot_ref(at);
        sb one = {NULL, 0, 0};
        if (list->n > 0) {
            jv_write(list->items[0], &one);
        } else {
            sb_str(&one, "0");
        }
        size_t n = byte(&r->in) % 2 ? 1000 : 100000;
        if (n > LONG_BYTES / (one.len + 2)) n = LONG_BYTES / (one.len + 2);
        sb b = {NULL, 0, 0};
        sb_str(&b, "[");
        for (size_t k = 0; k < n; k++) {
            if (k > 0) sb_add(&b, ", ", 2);
            sb_add(&b, one.p, one.len);
        }
        sb_str(&b, "]");
        free(one.p);
        jslot_put(at, jv_from_sb(&b));
    }
    free(s.v);
    return changed;
}

/* A list stretched to 10^3 or 10^5 copies of its first item. */
static void edit_long(recipe *r) { on_json(r, is_json, long_in); }

/* -- edits of a program -- */

static const char *const targets[] = {"torch.ops.aten.no_such_operator.default",
                                      "torch.ops.fulmen_fuzz.custom.default",
                                      "torch.ops.higher_order.cond",
                                      "torch.ops.higher_order.while_loop",
                                      "torch.ops.higher_order.wrap_with_autocast",
                                      "torch.ops.higher_order.wrap_with_set_grad_enabled",
                                      "torch.ops.aten..default",
                                      "torch.ops.aten.linear",
                                      "torch.ops.aten.linear.default.x",
                                      "torch.ops.aten.linear.no_such_overload",
                                      "torch.ops.higher_order",
                                      "builtins.getattr",
                                      "_operator.getitem",
                                      "",
                                      "_operator.floordiv",
                                      "_operator.mod",
                                      "_operator.neg",
                                      "_operator.add",
                                      "_operator.truediv",
                                      "torch.sym_max",
                                      "_operator.not_",
                                      "torch.ops.aten.add.Tensor",
                                      "torch.ops.aten.mul.Scalar",
                                      "torch.ops.aten.view.default",
                                      "torch.ops.aten.sum.default",
                                      "torch.ops.aten.relu_.default",
                                      "torch.ops.aten.add_.Tensor",
                                      "torch.ops.aten.copy_.default",
                                      "torch.ops.aten.unbind.int",
                                      "torch.ops.aten.split.Tensor",
                                      "torch.ops.aten.cat.default",
                                      "torch.ops.aten.zeros.default",
                                      "torch.ops.aten.sym_size.int",
                                      "torch.ops.aten.t.default",
                                      "torch.ops.aten.embedding.default",
                                      "torch.ops.aten.native_batch_norm.default",
                                      "torch.ops.aten._assert_scalar.default"};

static bool target_in(recipe *r, jv *doc, const char *name) {
    (void)name;
    jv *node = pick_node(doc, &r->in);
    if (node == NULL) return false;
    jv *target = NULL;
    if (byte(&r->in) % 4 == 0) {
        const jv *other = jv_get(pick_node(doc, &r->in), "target");
        target = other != NULL ? jv_copy(other) : jv_str("");
    } else {
        target = jv_str(CHOOSE(&r->in, targets));
    }
    jv_set(node, "target", target);
    return true;
}

/* A node's operator replaced: unknown, higher-order, malformed, Python's
 * arithmetic, another ATen operator, another node's. */
static void edit_target(recipe *r) { on_json(r, is_program, target_in); }

static bool arg_in(recipe *r, jv *doc, const char *name) {
    (void)name;
    input *in = &r->in;
    jslots s = {NULL, 0, 0};
    if (byte(in) % 4 == 0) {
        /* a node's or the graph's result */
        jslots lists = {NULL, 0, 0};
        jslots_find(doc, J_ARR, "outputs", &lists);
        if (lists.n > 0) {
            jv *list = *slot_ref(lists.v[pick(in, lists.n)]);
            for (size_t k = 0; k < list->n; k++) jslots_add(&s, list, k);
        }
        free(lists.v);
    } else {
        /* a node's argument, or a user input's or output's in the signature */
        jslots_find(doc, -1, "arg", &s);
    }
    bool changed = s.n > 0;
    if (changed) {
        jslot at = s.v[pick(in, s.n)];
        jslot_put(at, new_arg(in, doc));
    }
    free(s.v);
    return changed;
}

/* An argument or a result replaced by one of another kind. */
static void edit_arg(recipe *r) { on_json(r, is_program, arg_in); }

/* Python's arithmetic on sizes, at its edges: (operator, a, b). */
static const char *const extremes[][3] = {
    {"_operator.floordiv", "-9223372036854775808", "-1"},
    {"_operator.mod", "-9223372036854775808", "-1"},
    {"_operator.floordiv", "1", "0"},
    {"_operator.mod", "7", "0"},
    {"_operator.truediv", "1", "0"},
    {"_operator.add", "9223372036854775807", "1"},
    {"_operator.sub", "-9223372036854775808", "1"},
    {"_operator.mul", "9223372036854775807", "2"},
    {"_operator.neg", "-9223372036854775808", NULL},
};

static const char *const arithmetic[] = {"_operator.floordiv", "_operator.mod", "_operator.add",   "_operator.sub",
                                         "_operator.mul",      "_operator.truediv", "torch.sym_max", "torch.sym_min",
                                         "_operator.eq",       "_operator.lt",  "_operator.neg",   "_operator.not_",
                                         "torch.sym_not"};

/* One operand of a new arithmetic node, into `b`. */
static void operand(sb *b, input *in, jv *doc) {
    const char *v = CHOOSE(in, ints);
    switch (byte(in) % 5) {
    case 0:
    case 1: sb_fmt(b, "{\"as_int\": %s}", v); break;
    case 2: sb_fmt(b, "{\"as_sym_int\": {\"as_int\": %s}}", v); break;
    case 3: sb_fmt(b, "{\"as_float\": %s}", CHOOSE(in, floats)); break;
    default: {
        char *name = a_name(doc, in);
        sb_fmt(b, "{\"as_sym_int\": {\"as_name\": \"%s\"}}", name);
        free(name);
        break;
    }
    }
}

static bool arith_in(recipe *r, jv *doc, const char *name) {
    (void)name;
    input *in = &r->in;
    jv *list = pick_node_list(doc, in);
    if (list == NULL) return false;
    sb b = {NULL, 0, 0};
    unsigned how = byte(in);
    if (how % 4 == 0) {
        const char *const *e = extremes[(how / 4) % (sizeof extremes / sizeof *extremes)];
        sb_fmt(&b, "{\"target\": \"%s\", \"inputs\": [{\"name\": \"\", \"arg\": {\"as_int\": %s}, \"kind\": 1}", e[0],
               e[1]);
        if (e[2] != NULL) sb_fmt(&b, ", {\"name\": \"\", \"arg\": {\"as_int\": %s}, \"kind\": 1}", e[2]);
    } else {
        const char *op = CHOOSE(in, arithmetic);
        bool unary = strstr(op, "neg") != NULL || strstr(op, "not") != NULL;
        sb_fmt(&b, "{\"target\": \"%s\", \"inputs\": [{\"name\": \"\", \"arg\": ", op);
        operand(&b, in, doc);
        sb_str(&b, ", \"kind\": 1}");
        if (!unary || byte(in) % 8 == 0) {
            sb_str(&b, ", {\"name\": \"\", \"arg\": ");
            operand(&b, in, doc);
            sb_str(&b, ", \"kind\": 1}");
        }
    }
    sb_fmt(&b, "], \"outputs\": [{\"as_sym_int\": {\"as_name\": \"fuzz_%d\"}}], \"metadata\": {}}", r->fresh++);
    jv_insert(list, pick(in, list->n + 1), NULL, jv_from_text(&b));
    return true;
}

/* A new node of Python's arithmetic on ints (INT64_MIN // -1, 1 % 0,
 * INT64_MAX + 1, ...), floats or graph values. */
static void edit_arith(recipe *r) { on_json(r, is_program, arith_in); }

/* Appends the input `name` = `arg` to a node being written. */
static void node_input(sb *b, const char *name, const char *arg) {
    sb_fmt(b, "%s{\"name\": \"%s\", \"arg\": %s, \"kind\": 1}", b->p[b->len - 1] == '[' ? "" : ", ", name, arg);
}

static bool op_in(recipe *r, jv *doc, const char *name) {
    (void)name;
    input *in = &r->in;
    jv *list = pick_node_list(doc, in);
    if (list == NULL) return false;
    char *x = a_name(doc, in);
    const char *v = CHOOSE(in, ints), *u = CHOOSE(in, ints);
    int k = r->fresh++;
    sb self = {NULL, 0, 0}, first = {NULL, 0, 0}, second = {NULL, 0, 0}, pair = {NULL, 0, 0};
    sb ins = {NULL, 0, 0}, out = {NULL, 0, 0}, node = {NULL, 0, 0};
    sb_fmt(&self, "{\"as_tensor\": {\"name\": \"%s\"}}", x);
    sb_fmt(&first, "{\"as_int\": %s}", v);
    sb_fmt(&second, "{\"as_int\": %s}", u);
    sb_fmt(&pair, "{\"as_ints\": [%s, %s]}", v, u);
    sb_fmt(&out, "{\"as_tensor\": {\"name\": \"fuzz_%d\"}}", k);
    sb_str(&ins, "[");
    const char *target = NULL;
    switch (byte(in) % 14) {
    case 0:
        target = "empty.memory_format";
        node_input(&ins, "size", pair.p);
        break;
    case 1:
        target = "zeros.default";
        node_input(&ins, "size", pair.p);
        break;
    case 2:
        target = "full.default";
        node_input(&ins, "size", pair.p);
        node_input(&ins, "fill_value", "{\"as_float\": 1.5}");
        break;
    case 3:
        target = "arange.default";
        node_input(&ins, "end", first.p);
        break;
    case 4:
        target = "expand.default";
        node_input(&ins, "self", self.p);
        node_input(&ins, "size", pair.p);
        break;
    case 5:
        target = "view.default";
        node_input(&ins, "self", self.p);
        node_input(&ins, "size", pair.p);
        break;
    case 6:
        target = "repeat.default";
        node_input(&ins, "self", self.p);
        node_input(&ins, "repeats", pair.p);
        break;
    case 7:
        target = "new_empty.default";
        node_input(&ins, "self", self.p);
        node_input(&ins, "size", pair.p);
        break;
    case 8:
        target = "empty_strided.default";
        node_input(&ins, "size", pair.p);
        node_input(&ins, "stride", pair.p);
        break;
    case 9:
        target = "as_strided.default";
        node_input(&ins, "self", self.p);
        node_input(&ins, "size", pair.p);
        node_input(&ins, "stride", pair.p);
        node_input(&ins, "storage_offset", second.p);
        break;
    case 10:
        target = "split.Tensor";
        node_input(&ins, "self", self.p);
        node_input(&ins, "split_size", first.p);
        out.len = 0;
        sb_fmt(&out, "{\"as_tensors\": [{\"name\": \"fuzz_%d\"}, {\"name\": \"fuzz_%d_b\"}]}", k, k);
        break;
    case 11:
        target = "sym_size.int";
        node_input(&ins, "self", self.p);
        node_input(&ins, "dim", first.p);
        out.len = 0;
        sb_fmt(&out, "{\"as_sym_int\": {\"as_name\": \"fuzz_%d\"}}", k);
        break;
    case 12:
        target = "select.int";
        node_input(&ins, "self", self.p);
        node_input(&ins, "dim", "{\"as_int\": 0}");
        node_input(&ins, "index", first.p);
        break;
    default:
        target = "narrow.default";
        node_input(&ins, "self", self.p);
        node_input(&ins, "dim", "{\"as_int\": 0}");
        node_input(&ins, "start", first.p);
        node_input(&ins, "length", second.p);
        break;
    }
    sb_str(&ins, "]");
    sb_fmt(&node, "{\"target\": \"torch.ops.aten.%s\", \"inputs\": %s, \"outputs\": [%s], \"metadata\": {}}", target,
           ins.p, out.p);
    jv_insert(list, pick(in, list->n + 1), NULL, jv_from_text(&node));
    free(self.p);
    free(first.p);
    free(second.p);
    free(pair.p);
    free(ins.p);
    free(out.p);
    free(x);
    return true;
}

/* A new ATen node asked for a huge, negative or overflowing size (the
 * values these nodes define are never read by others). */
static void edit_op(recipe *r) { on_json(r, is_program, op_in); }

/* -- edits of the weights config and the stored tensors -- */

static const char *const paths[] = {"weight_999", "../x", "..", "", ".data/version", "a/b", "/etc/passwd",
                                    "weight_0",   "weight_1", "constant_0", "\\u0000"};

static const char *const odd_values[] = {"null",
                                         "[]",
                                         "{}",
                                         "\"7\"",
                                         "7.5",
                                         "[{\"as_expr\": {\"expr_str\": \"s0\"}}]",
                                         "{\"as_int\": 1, \"as_float\": 1.0}",
                                         "{\"as_int\": \"0\"}"};

/* Views whose reach overflows: (size, stride, dims). */
static const char *const views[][3] = {
    {"4611686018427387905", "4611686018427387904", "16"}, /* 16 x 2^62 x 2^62 = 2^128 */
    {"4294967296", "0", "3"},                             /* 2^96 elements, all one */
    {"1099511627776", "0", "1"},                          /* 2^40 elements, all one */
    {"9223372036854775807", "9223372036854775807", "5"},
    {"3037000500", "3037000500", "2"},
};

static bool meta_in(recipe *r, jv *doc, const char *name) {
    (void)name;
    input *in = &r->in;
    jv *config = jv_get(doc, "config");
    if (config == NULL || config->kind != J_OBJ || config->n == 0) return false;
    size_t k = pick(in, config->n);
    jv *entry = config->items[k];
    jv *meta = jv_get(entry, "tensor_meta");
    char num[32];
    unsigned how = byte(in) % 12;
    switch (how) {
    case 0:
    case 1: {
        /* every size (or stride) the same number, 0 to 65 dims */
        static const unsigned dims[] = {0, 1, 2, 3, 5, 16, 65};
        unsigned d = dims[byte(in) % 7];
        jv_set(meta, how == 0 ? "sizes" : "strides", int_list(d, a_number(in, num)));
        break;
    }
    case 2: {
        /* one size or stride */
        jv *list = jv_get(meta, byte(in) % 2 ? "sizes" : "strides");
        if (list != NULL && list->kind == J_ARR && list->n > 0) {
            size_t j = pick(in, list->n);
            jv_free(list->items[j]);
            list->items[j] = as_int(a_number(in, num));
        }
        break;
    }
    case 3: jv_set(meta, "storage_offset", as_int(a_number(in, num))); break;
    case 4: jv_set(meta, "dtype", jv_raw(CHOOSE(in, codes))); break;
    case 5: jv_set(meta, "layout", jv_raw(CHOOSE(in, codes))); break;
    case 6: jv_set(entry, "path_name", jv_str(CHOOSE(in, paths))); break;
    case 7: jv_set(entry, "use_pickle", jv_raw("true")); break;
    case 8:
        jv_set(entry, "is_param", jv_raw(byte(in) % 2 ? "false" : "true"));
        jv_set(meta, "requires_grad", jv_raw(byte(in) % 2 ? "true" : "\"yes\""));
        break;
    case 9: {
        unsigned what = byte(in) % 3;
        if (what == 0) {
            /* an entry the programs read is gone */
            jv_free(jv_take(config, k));
        } else if (what == 1) {
            /* renamed: the programs read a name the config lacks */
            sb key = {NULL, 0, 0};
            sb_fmt(&key, "%sx", config->keys[k]);
            free(config->keys[k]);
            config->keys[k] = key.p;
        } else {
            /* one no program reads */
            jv_push(config, dup_s("fuzz.extra"), jv_copy(entry));
        }
        break;
    }
    case 10: {
        const char *const *v = views[byte(in) % (sizeof views / sizeof *views)];
        unsigned d = (unsigned)atoi(v[2]);
        jv_set(meta, "sizes", int_list(d, v[0]));
        jv_set(meta, "strides", int_list(d, v[1]));
        jv_set(meta, "storage_offset", as_int("0"));
        break;
    }
    default: {
        static const char *const fields[] = {"sizes", "strides", "storage_offset", "dtype", "layout"};
        const char *field = CHOOSE(in, fields);
        if (byte(in) % 2) {
            jv_remove(meta, field);
        } else {
            jv_set(meta, field, jv_raw(CHOOSE(in, odd_values)));
        }
        break;
    }
    }
    return true;
}

/* The weights config lies: sizes, strides, offsets, dtype, layout, file. */
static void edit_meta(recipe *r) { on_json(r, is_weights_config, meta_in); }

/* A stored tensor's file truncated, emptied, dropped, grown or refilled. */
static void edit_file(recipe *r) {
    int i = pick_record(r, is_tensor_file);
    if (i < 0) return;
    record *rec = &r->a.r[i];
    switch (byte(&r->in) % 7) {
    case 0: rec->size = 0; break;
    case 1: rec->size = rec->size > 0 ? 1 : 0; break;
    case 2: rec->size -= rec->size > 0 ? 1 : 0; break;
    case 3: rec->size /= 2; break;
    case 4: archive_remove(&r->a, i); break;
    case 5: record_insert(rec, rec->size, "abc", 3); break;
    default:
        /* NaNs, or bytes no bool holds */
        if (rec->size > 0) memset(rec->data, byte(&r->in) % 2 ? 0xff : 0x02, rec->size);
        break;
    }
}

/* -- edits of the pytree specs -- */

#define SPEC_LEAF "{\"type\": null, \"context\": null, \"children_spec\": []}"
#define SPEC_TUPLE_OPEN "{\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": ["

static const char *const spec_types[] = {
    "\"dataclasses.X\"", "\"collections.namedtuple\"", "\"builtins.set\"", "null", "42", "\"builtins.dict\"",
    "\"builtins.list\"", "\"torch.fx.immutable_collections.immutable_list\"", "\"collections.OrderedDict\"",
    "\"builtins.tuple\""};

/* Dict contexts (the characters of a JSON string holding JSON). */
static const char *const contexts[] = {"[\\\"a\\\"]", "[1, 2, 3]", "[[1]]",       "x",  "[true]",
                                       "[1.5]",      "null",      "[]", "[\\\"loss\\\", \\\"loss\\\"]", "{"};

static const char *const odd_children[] = {"null", "{}", "[1]", "[" SPEC_LEAF ", null]", "\"x\""};

/* Whole specs (JSON texts, escaped when stored). */
static const char *const bad_specs[] = {"",
                                        "[1]",
                                        "[1, null]",
                                        "null",
                                        "[1, {}]",
                                        "{",
                                        "[2, " SPEC_LEAF "]",
                                        "[1, {\"type\": null, \"context\": null, \"children_spec\": [1]}]",
                                        "[1, {\"type\": \"builtins.tuple\", \"context\": \"null\", "
                                        "\"children_spec\": {}}]",
                                        "[1, {\"type\": \"builtins.dict\", \"context\": 5, \"children_spec\": []}]"};

/* One edit `how` (0..6) of a spec's tree. */
static void spec_edit(jv *tree, unsigned how, input *in) {
    jslots kids = {NULL, 0, 0}, nodes = {NULL, 0, 0};
    jslots_find(tree, J_ARR, "children_spec", &kids);
    jslots_find(tree, J_OBJ, NULL, &nodes);
    jv *list = kids.n > 0 ? *slot_ref(kids.v[pick(in, kids.n)]) : NULL;
    bool have_node = nodes.n > 0;
    jslot at = have_node ? nodes.v[pick(in, nodes.n)] : (jslot){NULL, 0};
    jv *node = have_node ? *slot_ref(at) : NULL;
    switch (how) {
    case 0:
        /* a child dropped: a leaf too few */
        if (list != NULL && list->n > 0) jv_free(jv_take(list, pick(in, list->n)));
        break;
    case 1:
        /* a child repeated: a leaf too many */
        if (list != NULL && list->n > 0) {
            size_t from = pick(in, list->n), to = pick(in, list->n + 1);
            jv_insert(list, to, NULL, jv_copy(list->items[from]));
        }
        break;
    case 2: jv_set(node, "type", jv_raw(CHOOSE(in, spec_types))); break;
    case 3: jv_set(node, "context", jv_str(CHOOSE(in, contexts))); break;
    case 4:
        if (have_node) {
            static const size_t depths[] = {100, 127, 128, 129, 1000, 10000};
            size_t d = depths[byte(in) % 6];
            sb b = {NULL, 0, 0};
            for (size_t k = 0; k < d; k++) sb_str(&b, SPEC_TUPLE_OPEN);
            jv_write(node, &b);
            for (size_t k = 0; k < d; k++) sb_str(&b, "]}");
            jslot_put(at, jv_from_sb(&b));
        }
        break;
    case 5:
        if (list != NULL) {
            static const size_t counts[] = {0, 2, 100, 65537};
            size_t n = counts[byte(in) % 4];
            sb b = {NULL, 0, 0};
            sb_str(&b, "[");
            for (size_t k = 0; k < n; k++) sb_str(&b, k > 0 ? ", " SPEC_LEAF : SPEC_LEAF);
            sb_str(&b, "]");
            for (size_t k = 0; k < kids.n; k++) {
                if (*slot_ref(kids.v[k]) == list) {
                    jslot_put(kids.v[k], jv_from_sb(&b));
                    break;
                }
            }
            free(b.p);
        }
        break;
    default: jv_set(node, "children_spec", jv_raw(CHOOSE(in, odd_children))); break;
    }
    free(kids.v);
    free(nodes.v);
}

static bool spec_in(recipe *r, jv *doc, const char *name) {
    (void)name;
    input *in = &r->in;
    jv *call_graph = jv_get(jv_get(doc, "graph_module"), "module_call_graph");
    unsigned how = byte(in) % 9;
    if (how == 8) {
        /* the call graph's first entry gone, or all of them */
        if (call_graph == NULL || call_graph->kind != J_ARR || call_graph->n == 0) return false;
        bool all = byte(in) % 2 == 0;
        do {
            jv_free(jv_take(call_graph, 0));
        } while (all && call_graph->n > 0);
        return true;
    }
    jv *sig = call_graph != NULL && call_graph->kind == J_ARR && call_graph->n > 0
                  ? jv_get(call_graph->items[0], "signature")
                  : NULL;
    const char *which = byte(in) % 2 ? "in_spec" : "out_spec";
    jv *spec = jv_get(sig, which);
    if (spec == NULL || spec->kind != J_STR) return false;
    size_t plain_len = 0;
    char *plain = json_unescape(spec->text, spec->len, &plain_len);
    jv *tree = jv_parse(plain, plain_len);
    free(plain);
    sb text = {NULL, 0, 0};
    if (how == 7 || tree == NULL) {
        sb_str(&text, CHOOSE(in, bad_specs));
    } else {
        spec_edit(tree, how, in);
        jv_write(tree, &text);
    }
    jv_free(tree);
    sb escaped = {NULL, 0, 0};
    sb_escaped(&escaped, text.p, text.len);
    free(text.p);
    jv_set(sig, which, jv_text(J_STR, escaped.p != NULL ? escaped.p : "", escaped.len));
    free(escaped.p);
    return true;
}

/* The pytree specs lie: leaf counts, node types, dict keys, nesting. */
static void edit_spec(recipe *r) { on_json(r, is_program, spec_in); }

/* -- edits of the archive -- */

static const char *const program_names[] = {"models/model.json", "models/forward.json", "models/training_step.json",
                                             "models/a/b.json",   "models/.json",        "models/extra.json"};

/* Copies program `p` (its JSON and configs) as "extra", room allowing. */
static void copy_program(archive *a, int p) {
    const char *name = a->r[p].name;
    size_t stem_len = strlen(name) - strlen("models/") - strlen(".json");
    char *stem = dup_n(name + strlen("models/"), stem_len);
    static const char *const kinds[] = {"weights", "constants"};
    for (int k = 0; k < 2; k++) {
        sb from = {NULL, 0, 0}, to = {NULL, 0, 0};
        sb_fmt(&from, "data/%s/%s_%s_config.json", kinds[k], stem, kinds[k]);
        sb_fmt(&to, "data/%s/extra_%s_config.json", kinds[k], kinds[k]);
        int c = find_record(a, from.p);
        if (c >= 0) archive_add(a, to.p, a->r[c].data, a->r[c].size);
        free(from.p);
        free(to.p);
    }
    archive_add(a, "models/extra.json", a->r[p].data, a->r[p].size);
    free(stem);
}

static void edit_archive(recipe *r) {
    archive *a = &r->a;
    input *in = &r->in;
    switch (byte(in) % 8) {
    case 0:
        if (a->n > 0) archive_remove(a, (int)pick(in, (size_t)a->n));
        break;
    case 1: {
        int i = find_record(a, "archive_format");
        if (i >= 0 && byte(in) % 2) {
            archive_remove(a, i);
        } else if (i >= 0) {
            record_set(&a->r[i], "pt3", 3);
        }
        break;
    }
    case 2: {
        int i = find_record(a, "byteorder");
        if (i >= 0) record_set(&a->r[i], "big", 3);
        break;
    }
    case 3: {
        int p = pick_record(r, is_program);
        if (p >= 0) copy_program(a, p);
        break;
    }
    case 4: {
        int p = pick_record(r, is_program);
        if (p >= 0) {
            free(a->r[p].name);
            a->r[p].name = dup_s(CHOOSE(in, program_names));
        }
        break;
    }
    case 5: {
        /* a record outside the archive's folder */
        int i = a->n > 0 ? (int)pick(in, (size_t)a->n) : -1;
        if (i >= 0) {
            sb name = {NULL, 0, 0};
            sb_fmt(&name, "!%s", byte(in) % 2 ? "other/x" : a->r[i].name);
            free(a->r[i].name);
            a->r[i].name = name.p;
        }
        break;
    }
    case 6: archive_free(a); break;
    default: {
        /* a record with a name that is not UTF-8, or a long one */
        sb name = {NULL, 0, 0};
        if (byte(in) % 2) {
            sb_str(&name, "models/\xff.json");
        } else {
            sb_str(&name, "models/");
            for (int k = 0; k < 300; k++) sb_str(&name, "x");
            sb_str(&name, ".json");
        }
        archive_add(a, name.p, "{}", 2);
        free(name.p);
        break;
    }
    }
}

static void (*const edit_table[])(recipe *) = {edit_flip,   edit_break, edit_list,   edit_number, edit_string,
                                               edit_deep,   edit_long,  edit_target, edit_arg,    edit_arith,
                                               edit_op,     edit_meta,  edit_file,   edit_spec,   edit_archive};

#define N_EDITS (sizeof edit_table / sizeof *edit_table)

static void apply_edits(recipe *r) {
    for (int k = 0; k < MAX_EDITS && r->in.n > 0; k++) {
        edit_table[byte(&r->in) % N_EDITS](r);
        edits++;
    }
}

/* ---- the fixed world: fixtures and arguments ---- */

#define N_BASES 3
static const char *const fixture_names[N_BASES] = {"exported_bn.pt2", "exported_tied.pt2", "exported_nograd.pt2"};

#define MAX_ARGSETS 48

static struct {
    bool ready;
    archive base[N_BASES];
    uint8_t *raw[N_BASES];
    size_t raw_size[N_BASES];
    /* positional arguments of the calls */
    fulmen_value *args[MAX_ARGSETS][2];
    size_t n_args[MAX_ARGSETS];
    size_t n_argsets;
    /* good arguments of each fixture's program */
    size_t good[N_BASES];
    fulmen_tensor *x3, *tokens3;
} w;

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    uint8_t *data = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        data = xmalloc((size_t)n);
        if (fread(data, 1, (size_t)n, f) != (size_t)n) {
            free(data);
            data = NULL;
        }
    }
    fclose(f);
    *size = n >= 0 ? (size_t)n : 0;
    return data;
}

static void write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (f == NULL || (size > 0 && fwrite(data, 1, size, f) != size) || fclose(f) != 0) fail("cannot write", path);
}

/* A float32 or float64 tensor of rows x cols (cols 0: 1-D). */
static fulmen_tensor *tensor_f(int32_t dtype, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    size_t n = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    size_t elem = dtype == FULMEN_DTYPE_F64 ? 8 : 4;
    uint8_t *data = xmalloc(n * elem);
    for (size_t i = 0; i < n; i++) {
        double v = (double)(i % 7) * 0.25 - 0.75;
        float f = (float)v;
        if (elem == 8) {
            memcpy(data + i * 8, &v, 8);
        } else {
            memcpy(data + i * 4, &f, 4);
        }
    }
    fulmen_tensor *t = NULL;
    need(fulmen_tensor_from_data(data, n * elem, dtype, shape, cols > 0 ? 2 : 1, &t), "a float tensor");
    free(data);
    return t;
}

/* An int64 tensor of rows x cols (cols 0: 1-D) holding lo, lo + 1, ...,
 * lo + span - 1, lo, ... */
static fulmen_tensor *tensor_i(int64_t rows, int64_t cols, int64_t lo, int64_t span) {
    int64_t shape[2] = {rows, cols};
    size_t n = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    int64_t *data = xmalloc(n * sizeof *data);
    for (size_t i = 0; i < n; i++) data[i] = lo + (int64_t)(i % (size_t)span);
    fulmen_tensor *t = NULL;
    need(fulmen_tensor_from_data(data, n * sizeof *data, FULMEN_DTYPE_I64, shape, cols > 0 ? 2 : 1, &t),
         "an int tensor");
    free(data);
    return t;
}

static fulmen_value *vt(const fulmen_tensor *t) {
    fulmen_value *v = NULL;
    need(fulmen_value_tensor(t, &v), "a tensor value");
    return v;
}

/* A tuple (or a list) of the items that are not NULL, which it frees. */
static fulmen_value *seq(bool list, fulmen_value *a, fulmen_value *b, fulmen_value *c) {
    fulmen_value *own[3] = {a, b, c};
    const fulmen_value *items[3] = {NULL, NULL, NULL};
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        if (own[i] != NULL) items[n++] = own[i];
    }
    fulmen_value *v = NULL;
    need(list ? fulmen_value_list(items, n, &v) : fulmen_value_tuple(items, n, &v), "a sequence value");
    for (int i = 0; i < 3; i++) fulmen_value_free(own[i]);
    return v;
}

/* Adds the argument list (a, b), NULL ones left out; returns its index. */
static size_t add_args(fulmen_value *a, fulmen_value *b) {
    size_t k = w.n_argsets++;
    if (k >= MAX_ARGSETS) abort();
    size_t n = 0;
    if (a != NULL) w.args[k][n++] = a;
    if (b != NULL) w.args[k][n++] = b;
    w.n_args[k] = n;
    return k;
}

static void make_args(void) {
    static const int64_t rows[3] = {3, 1, 0};
    fulmen_tensor *x[3], *y[3], *tokens[3];
    for (int i = 0; i < 3; i++) {
        x[i] = tensor_f(FULMEN_DTYPE_F32, rows[i], 4);
        y[i] = tensor_i(rows[i], 0, 0, 3);
        tokens[i] = tensor_i(rows[i], 5, 0, 10);
    }
    fulmen_tensor *x_f64 = tensor_f(FULMEN_DTYPE_F64, 3, 4), *x_i64 = tensor_i(3, 4, 0, 3);
    fulmen_tensor *x_wide = tensor_f(FULMEN_DTYPE_F32, 3, 5), *x_flat = tensor_f(FULMEN_DTYPE_F32, 4, 0);
    fulmen_tensor *y_f32 = tensor_f(FULMEN_DTYPE_F32, 3, 0), *y_far = tensor_i(3, 0, 5, 3);
    fulmen_tensor *tokens_far = tensor_i(3, 5, 8, 5), *tokens_f32 = tensor_f(FULMEN_DTYPE_F32, 3, 5);
    fulmen_value *key_x = NULL, *key_y = NULL, *dict = NULL, *number = NULL, *none = NULL, *text = NULL;
    /* a batch (x, y), x alone, tokens alone: 3, 1 and 0 rows */
    for (int i = 0; i < 3; i++) {
        size_t batch = add_args(seq(false, vt(x[i]), vt(y[i]), NULL), NULL);
        add_args(seq(true, vt(x[i]), vt(y[i]), NULL), NULL);
        size_t alone = add_args(vt(x[i]), NULL);
        size_t toks = add_args(vt(tokens[i]), NULL);
        if (i == 0) {
            w.good[0] = batch;
            w.good[1] = toks;
            w.good[2] = alone;
        }
    }
    /* wrong dtypes, ids out of range */
    add_args(seq(false, vt(x_f64), vt(y[0]), NULL), NULL);
    add_args(seq(false, vt(x_i64), vt(y[0]), NULL), NULL);
    add_args(seq(false, vt(x[0]), vt(y_f32), NULL), NULL);
    add_args(seq(false, vt(x[0]), vt(y_far), NULL), NULL);
    add_args(seq(false, vt(tokens[0]), vt(y[0]), NULL), NULL);
    add_args(vt(x_f64), NULL);
    add_args(vt(x_i64), NULL);
    add_args(vt(x_wide), NULL);
    add_args(vt(x_flat), NULL);
    add_args(vt(tokens_far), NULL);
    add_args(vt(tokens_f32), NULL);
    /* wrong nesting */
    add_args(seq(false, vt(x[0]), NULL, NULL), NULL);
    add_args(seq(false, vt(x[0]), vt(y[0]), vt(x[0])), NULL);
    add_args(seq(false, seq(false, vt(x[0]), vt(y[0]), NULL), NULL, NULL), NULL);
    add_args(seq(true, NULL, NULL, NULL), NULL);
    need(fulmen_value_string("x", &key_x), "a key");
    need(fulmen_value_string("y", &key_y), "a key");
    const fulmen_value *keys[2] = {key_x, key_y};
    fulmen_value *vx = vt(x[0]), *vy = vt(y[0]);
    const fulmen_value *values[2] = {vx, vy};
    need(fulmen_value_dict(keys, values, 2, &dict), "a dict");
    add_args(dict, NULL);
    add_args(vt(x[0]), vt(y[0]));
    add_args(NULL, NULL);
    need(fulmen_value_int(3, &number), "an int");
    add_args(number, NULL);
    need(fulmen_value_none(&none), "None");
    add_args(none, NULL);
    need(fulmen_value_string("x", &text), "a string");
    add_args(text, NULL);
    fulmen_value_free(key_x);
    fulmen_value_free(key_y);
    fulmen_value_free(vx);
    fulmen_value_free(vy);
    w.x3 = x[0];
    w.tokens3 = tokens[0];
    for (int i = 1; i < 3; i++) {
        fulmen_tensor_free(x[i]);
        fulmen_tensor_free(tokens[i]);
    }
    for (int i = 0; i < 3; i++) fulmen_tensor_free(y[i]);
    fulmen_tensor *rest[] = {x_f64, x_i64, x_wide, x_flat, y_f32, y_far, tokens_far, tokens_f32};
    for (size_t i = 0; i < sizeof rest / sizeof *rest; i++) fulmen_tensor_free(rest[i]);
}

static fulmen_error *call(const fulmen_model *m, const char *program, size_t k, fulmen_value **out) {
    return fulmen_model_call_method(m, NULL, program, (const fulmen_value *const *)w.args[k], w.n_args[k], out);
}

/* Each fixture, packed again without edits, loads and its program runs
 * on good arguments: else every input would fail for a reason of this
 * target's own. */
static void check_fixtures(void) {
    static const char *const program[N_BASES] = {"training_step", "forward", "forward"};
    char path[160];
    snprintf(path, sizeof path, "%s/fixture.pt2", fuzz_work_dir());
    for (int b = 0; b < N_BASES; b++) {
        if (archive_write(&w.base[b], path) != 0) fail("cannot write", path);
        fulmen_model *m = NULL;
        fulmen_value *out = NULL;
        need(fulmen_model_load_exported(path, &m), fixture_names[b]);
        need(call(m, program[b], w.good[b], &out), fixture_names[b]);
        fulmen_value_free(out);
        fulmen_model_free(m);
    }
    unlink(path);
}

static void set_up(void) {
    if (w.ready) return;
    w.ready = true;
    const char *dir = getenv("FULMEN_FIXTURES");
    for (int b = 0; b < N_BASES; b++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir != NULL ? dir : "tests/fixtures", fixture_names[b]);
        w.raw[b] = read_file(path, &w.raw_size[b]);
        if (w.raw[b] == NULL || archive_parse(&w.base[b], w.raw[b], w.raw_size[b]) != 0) {
            fprintf(stderr, "fuzz exported: set-up failed: cannot read the fixture %s\n", path);
            abort();
        }
    }
    make_args();
    check_fixtures();
}

void fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    set_up();
    /* the fixtures as they are, for the zip layer */
    for (int b = 0; b < N_BASES; b++) add(w.raw[b], w.raw_size[b]);
    /* every edit of every fixture, with varied operand bytes */
    for (int b = 0; b < N_BASES; b++) {
        uint8_t plain[1] = {(uint8_t)b};
        add(plain, sizeof plain);
        for (unsigned op = 0; op < N_EDITS; op++) {
            uint8_t bytes[24];
            bytes[0] = (uint8_t)b;
            bytes[1] = (uint8_t)op;
            for (size_t i = 2; i < sizeof bytes; i++) bytes[i] = (uint8_t)(i * 37 + op * 11 + (unsigned)b * 5);
            add(bytes, sizeof bytes);
        }
    }
}

/* ---- one archive ---- */

/* Reads what a program returned; the first one-element tensor in it is
 * backpropagated (through the program's graph). */
static void read_value(const fulmen_value *v, int depth, bool *backward) {
    int32_t kind = -1;
    if (check_error(fulmen_value_get_kind(v, &kind)) || depth > 8) return;
    if (kind == FULMEN_VALUE_KIND_TENSOR) {
        fulmen_tensor *t = NULL;
        if (!check_error(fulmen_value_get_tensor(v, &t))) {
            size_t numel = 0, ndim = 0;
            int64_t dims[8];
            check_error(fulmen_tensor_numel(t, &numel));
            check_error(fulmen_tensor_shape(t, dims, 8, &ndim));
            if (numel == 1 && !*backward) {
                *backward = true;
                check_error(fulmen_tensor_backward(t));
            }
        }
        fulmen_tensor_free(t);
    } else if (kind == FULMEN_VALUE_KIND_TUPLE || kind == FULMEN_VALUE_KIND_LIST || kind == FULMEN_VALUE_KIND_DICT) {
        size_t n = 0;
        if (check_error(fulmen_value_len(v, &n))) return;
        for (size_t i = 0; i < n && i < 16; i++) {
            fulmen_value *item = NULL;
            fulmen_error *e = kind == FULMEN_VALUE_KIND_DICT ? fulmen_value_dict_entry(v, i, NULL, &item)
                                                             : fulmen_value_item(v, i, &item);
            if (!check_error(e)) read_value(item, depth + 1, backward);
            fulmen_value_free(item);
        }
    }
}

/* Calls every program on every argument list, the forward entry points,
 * and reads the state_dict. */
static void exercise(const fulmen_model *m) {
    static const char *const programs[] = {"training_step", "forward", "extra"};
    for (size_t p = 0; p < sizeof programs / sizeof *programs; p++) {
        for (size_t k = 0; k < w.n_argsets; k++) {
            fulmen_value *out = NULL;
            calls++;
            if (!check_error(call(m, programs[p], k, &out))) {
                bool backward = false;
                calls_ok++;
                read_value(out, 0, &backward);
            }
            fulmen_value_free(out);
        }
    }
    fulmen_tensor *out = NULL;
    check_error(fulmen_model_forward(m, w.x3, &out));
    fulmen_tensor_free(out);
    out = NULL;
    check_error(fulmen_model_forward(m, w.tokens3, &out));
    fulmen_tensor_free(out);
    fulmen_tensor *outs[4] = {NULL, NULL, NULL, NULL};
    const fulmen_tensor *ins[1] = {w.x3};
    size_t count = 0;
    check_error(fulmen_model_forward_multi(m, NULL, ins, 1, outs, 4, &count));
    for (int i = 0; i < 4; i++) fulmen_tensor_free(outs[i]);
    size_t n = 0;
    int64_t params = 0;
    check_error(fulmen_model_num_parameters(m, &params));
    if (check_error(fulmen_model_state_dict_len(m, &n))) return;
    for (size_t i = 0; i < n && i < 64; i++) {
        char name[256];
        size_t len = 0, numel = 0;
        if (check_error(fulmen_model_state_dict_name(m, i, name, sizeof name, &len))) continue;
        fulmen_tensor *t = NULL;
        if (!check_error(fulmen_model_state_dict_get(m, name, &t))) check_error(fulmen_tensor_numel(t, &numel));
        fulmen_tensor_free(t);
    }
}

/* Loads the archive at `path`; on success runs its programs and frees it. */
static void try_archive(const char *path, bool on_cpu) {
    size_t before = fulmen_live_handles();
    fulmen_model *m = NULL;
    fulmen_error *e = on_cpu ? fulmen_model_load_exported_on(path, FULMEN_DEVICE_TYPE_CPU, 0, &m)
                             : fulmen_model_load_exported(path, &m);
    if (e != NULL) {
        if (fulmen_error_code(e) == FULMEN_CODE_OUT_OF_MEMORY) {
            fail("a failed load ran out of memory: an allocation by a size the file claims?", fulmen_error_message(e));
        }
        if (m != NULL) fail("a failed load wrote a model", fulmen_error_message(e));
        check_error(e);
    } else {
        loaded++;
        exercise(m);
        fulmen_model_free(m);
    }
    if (fulmen_live_handles() != before) fail("a handle leaked", path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    set_up();
    if (size > RAW_LIMIT) return 0;
    watch();
    char path[160];
    snprintf(path, sizeof path, "%s/input.pt2", fuzz_work_dir());
    inputs++;
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
        whole++;
        write_file(path, data, size);
    } else {
        recipe r;
        memset(&r, 0, sizeof r);
        r.in.p = data;
        r.in.n = size < RECIPE_LIMIT ? size : RECIPE_LIMIT;
        archive_copy(&r.a, &w.base[byte(&r.in) % N_BASES]);
        apply_edits(&r);
        if (archive_write(&r.a, path) != 0) fail("cannot write", path);
        archive_free(&r.a);
    }
    try_archive(path, size % 3 == 0);
    unlink(path);
    unwatch();
    return 0;
}
