/*
 * A collectives hook (fulmen_collectives) whose "communication library" is
 * the job's key-value store: every rank publishes its data under a key of
 * the round and reads the others'. Slow, but it needs nothing but fulmen,
 * so the examples, the tests and the conformance kit can run DDP on the
 * fake device through a hook; a vendor's hook calls its own library instead (HCCL,
 * oneCCL, ...), and typically uses the store only in group_new, to share
 * the library's unique id.
 *
 * Values travel as float64 (fulmen_tensor_copy_to converts any dtype), so
 * one code path serves every dtype. Include it in one C file; its functions
 * are static. `store_collectives_table()` gives the slots; with a
 * store_collectives_counts as the accelerator's userdata they count their
 * calls (NULL userdata: no counting).
 */
#ifndef FULMEN_STORE_COLLECTIVES_H
#define FULMEN_STORE_COLLECTIVES_H

#include <fulmen.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How many times each slot ran (for tests). */
typedef struct {
    int group_new, group_free, all_reduce, broadcast, all_gather, barrier, reduce_scatter;
} store_collectives_counts;

/* One rank's group: the store, where it stands, and the round counter
 * that names the keys (every rank issues the same collectives in order). */
typedef struct {
    const fulmen_dist_store *store;
    int32_t rank, world;
    uint64_t round;
    store_collectives_counts *counts;
} store_group;

static fulmen_error *sc_oom(void) { return fulmen_error_new(FULMEN_CODE_CALLBACK, "store collectives: out of memory"); }

/* Room for `n` x `m` doubles (malloc'd), or NULL when that overflows or
 * cannot be allocated. */
static double *sc_doubles(size_t n, size_t m) {
    if (n != 0 && m > SIZE_MAX / n / sizeof(double)) return NULL;
    size_t total = n * m;
    return malloc((total > 0 ? total : 1) * sizeof(double));
}

/* One round: publishes `mine` (`len` doubles; none when NULL) and, when
 * `all` is not NULL, reads rank r's values into all[(r - first) * len ...]
 * for every rank r in [first, last). The last rank to finish (failing or
 * not) removes the round's keys. */
static fulmen_error *sc_round(store_group *g, const double *mine, size_t len, double *all, int32_t first,
                              int32_t last) {
    char key[96];
    uint64_t round = g->round++;
    fulmen_error *e = NULL;
    if (mine != NULL) {
        snprintf(key, sizeof key, "round/%llu/%d", (unsigned long long)round, (int)g->rank);
        e = fulmen_dist_store_set(g->store, key, mine, len * sizeof(double));
    }
    for (int32_t r = first; e == NULL && r < last && all != NULL; r++) {
        size_t got = 0;
        snprintf(key, sizeof key, "round/%llu/%d", (unsigned long long)round, (int)r);
        e = fulmen_dist_store_get(g->store, key, all + (size_t)(r - first) * len, len * sizeof(double), &got);
        if (e == NULL && got != len * sizeof(double))
            e = fulmen_error_new(FULMEN_CODE_DISTRIBUTED, "store collectives: a rank sent a different size");
    }
    /* Every rank counts itself done; the last one cleans up (by then every
     * rank has read what it needed). */
    int64_t done = 0;
    snprintf(key, sizeof key, "round/%llu/done", (unsigned long long)round);
    fulmen_error *counted = fulmen_dist_store_add(g->store, key, 1, &done);
    for (int32_t r = 0; counted == NULL && done == g->world && r < g->world; r++) {
        char data_key[96];
        snprintf(data_key, sizeof data_key, "round/%llu/%d", (unsigned long long)round, (int)r);
        counted = fulmen_dist_store_delete(g->store, data_key, NULL);
    }
    if (counted == NULL && done == g->world) counted = fulmen_dist_store_delete(g->store, key, NULL);
    /* The first failure is the one to report. */
    if (e == NULL) return counted;
    fulmen_error_free(counted);
    return e;
}

/* A tensor's elements as doubles (malloc'd, `*n` of them). */
static fulmen_error *sc_read(const fulmen_tensor *t, double **out, size_t *n) {
    fulmen_error *e = fulmen_tensor_numel(t, n);
    if (e != NULL) return e;
    *out = sc_doubles(*n, 1);
    if (*out == NULL) return sc_oom();
    e = fulmen_tensor_copy_to(t, FULMEN_DTYPE_F64, *out, *n * sizeof(double));
    if (e != NULL) {
        free(*out);
        *out = NULL;
    }
    return e;
}

static fulmen_error *sc_group_new(void *ud, const fulmen_dist_store *store, int32_t rank, int32_t world,
                                  fulmen_device device, void **group_out) {
    (void)device;
    store_group *g = calloc(1, sizeof *g);
    if (g == NULL) return sc_oom();
    g->store = store;
    g->rank = rank;
    g->world = world;
    g->counts = ud;
    if (g->counts != NULL) g->counts->group_new++;
    *group_out = g;
    return NULL;
}

static void sc_group_free(void *ud, void *group) {
    (void)ud;
    store_group *g = group;
    if (g->counts != NULL) g->counts->group_free++;
    free(g);
}

/* NULL for a reduce op the slots know, else the error to return. */
static fulmen_error *sc_check_op(int32_t op) {
    if (op == FULMEN_REDUCE_OP_SUM || op == FULMEN_REDUCE_OP_PRODUCT || op == FULMEN_REDUCE_OP_MIN ||
        op == FULMEN_REDUCE_OP_MAX)
        return NULL;
    return fulmen_error_new(FULMEN_CODE_INVALID_ARGUMENT, "store collectives: unknown reduce op");
}

/* `v` reduced with `x` by `op`. */
static double sc_combine(int32_t op, double v, double x) {
    switch (op) {
        case FULMEN_REDUCE_OP_SUM: return v + x;
        case FULMEN_REDUCE_OP_PRODUCT: return v * x;
        case FULMEN_REDUCE_OP_MIN: return x < v ? x : v;
        case FULMEN_REDUCE_OP_MAX: return x > v ? x : v;
        default: return v;
    }
}

static fulmen_error *sc_all_reduce(void *ud, void *group, fulmen_tensor *const *tensors, size_t n, int32_t op) {
    (void)ud;
    store_group *g = group;
    if (g->counts != NULL) g->counts->all_reduce++;
    fulmen_error *bad_op = sc_check_op(op);
    if (bad_op != NULL) return bad_op;
    fulmen_error *e = NULL;
    for (size_t i = 0; e == NULL && i < n; i++) {
        double *mine = NULL, *all = NULL;
        size_t len = 0;
        e = sc_read(tensors[i], &mine, &len);
        if (e != NULL) break;
        all = sc_doubles(len, (size_t)g->world);
        if (all == NULL) e = sc_oom();
        if (e == NULL) e = sc_round(g, mine, len, all, 0, g->world);
        for (size_t k = 0; e == NULL && k < len; k++) {
            double v = all[k];
            for (int32_t r = 1; r < g->world; r++) v = sc_combine(op, v, all[(size_t)r * len + k]);
            mine[k] = v;
        }
        if (e == NULL) e = fulmen_tensor_copy_from_host(tensors[i], mine, len * sizeof(double), FULMEN_DTYPE_F64);
        free(all);
        free(mine);
    }
    return e;
}

static fulmen_error *sc_broadcast(void *ud, void *group, fulmen_tensor *const *tensors, size_t n, int32_t root) {
    (void)ud;
    store_group *g = group;
    if (g->counts != NULL) g->counts->broadcast++;
    fulmen_error *e = NULL;
    for (size_t i = 0; e == NULL && i < n; i++) {
        double *mine = NULL;
        size_t len = 0;
        e = sc_read(tensors[i], &mine, &len);
        if (e != NULL) break;
        /* root publishes; the others read root's values over their own. */
        if (g->rank == root) {
            e = sc_round(g, mine, len, NULL, 0, 0);
        } else {
            e = sc_round(g, NULL, len, mine, root, root + 1);
            if (e == NULL) e = fulmen_tensor_copy_from_host(tensors[i], mine, len * sizeof(double), FULMEN_DTYPE_F64);
        }
        free(mine);
    }
    return e;
}

static fulmen_error *sc_all_gather(void *ud, void *group, const fulmen_tensor *input, fulmen_tensor *const *outputs,
                                   size_t n) {
    (void)ud;
    store_group *g = group;
    if (g->counts != NULL) g->counts->all_gather++;
    if (n != (size_t)g->world)
        return fulmen_error_new(FULMEN_CODE_INVALID_ARGUMENT, "store collectives: all_gather needs one output per rank");
    double *mine = NULL;
    size_t len = 0;
    fulmen_error *e = sc_read(input, &mine, &len);
    if (e != NULL) return e;
    double *all = sc_doubles(len, (size_t)g->world);
    if (all == NULL) e = sc_oom();
    if (e == NULL) e = sc_round(g, mine, len, all, 0, g->world);
    for (int32_t r = 0; e == NULL && r < g->world; r++)
        e = fulmen_tensor_copy_from_host(outputs[r], all + (size_t)r * len, len * sizeof(double), FULMEN_DTYPE_F64);
    free(all);
    free(mine);
    return e;
}

/* Reduce-scatter: every rank publishes block d of its input for rank d
 * only ("round/N/<from>/<to>"), and reads the blocks the others published
 * for it, so each rank moves 1/world of what an all_reduce would. The
 * blocks are reduced in rank order, as sc_all_reduce reduces. As in
 * sc_round, every rank counts itself done, failing or not, and the last
 * one removes the round's keys. */
static fulmen_error *sc_reduce_scatter(void *ud, void *group, const fulmen_tensor *input, fulmen_tensor *output,
                                       int32_t op) {
    (void)ud;
    store_group *g = group;
    if (g->counts != NULL) g->counts->reduce_scatter++;
    fulmen_error *e = sc_check_op(op);
    if (e != NULL) return e;
    double *mine = NULL;
    size_t len = 0, block = 0;
    e = sc_read(input, &mine, &len);
    if (e != NULL) return e;
    e = fulmen_tensor_numel(output, &block);
    if (e == NULL && block * (size_t)g->world != len)
        e = fulmen_error_new(FULMEN_CODE_INVALID_ARGUMENT, "store collectives: reduce_scatter sizes disagree");
    /* blocks[r * block ...]: rank r's block for this rank */
    double *blocks = e == NULL ? sc_doubles(block, (size_t)g->world) : NULL;
    if (e == NULL && blocks == NULL) e = sc_oom();
    char key[112];
    uint64_t round = g->round++;
    for (int32_t d = 0; e == NULL && d < g->world; d++) {
        if (d == g->rank) continue;
        snprintf(key, sizeof key, "round/%llu/%d/%d", (unsigned long long)round, (int)g->rank, (int)d);
        e = fulmen_dist_store_set(g->store, key, mine + (size_t)d * block, block * sizeof(double));
    }
    for (int32_t r = 0; e == NULL && r < g->world; r++) {
        double *dst = blocks + (size_t)r * block;
        if (r == g->rank) {
            memcpy(dst, mine + (size_t)r * block, block * sizeof(double));
            continue;
        }
        size_t got = 0;
        snprintf(key, sizeof key, "round/%llu/%d/%d", (unsigned long long)round, (int)r, (int)g->rank);
        e = fulmen_dist_store_get(g->store, key, dst, block * sizeof(double), &got);
        if (e == NULL && got != block * sizeof(double))
            e = fulmen_error_new(FULMEN_CODE_DISTRIBUTED, "store collectives: a rank sent a different size");
    }
    for (size_t k = 0; e == NULL && k < block; k++) {
        double v = blocks[k];
        for (int32_t r = 1; r < g->world; r++) v = sc_combine(op, v, blocks[(size_t)r * block + k]);
        blocks[k] = v;
    }
    if (e == NULL) e = fulmen_tensor_copy_from_host(output, blocks, block * sizeof(double), FULMEN_DTYPE_F64);
    int64_t done = 0;
    snprintf(key, sizeof key, "round/%llu/done", (unsigned long long)round);
    fulmen_error *counted = fulmen_dist_store_add(g->store, key, 1, &done);
    for (int32_t from = 0; counted == NULL && done == g->world && from < g->world; from++) {
        for (int32_t to = 0; counted == NULL && to < g->world; to++) {
            char data_key[112];
            snprintf(data_key, sizeof data_key, "round/%llu/%d/%d", (unsigned long long)round, (int)from, (int)to);
            if (from != to) counted = fulmen_dist_store_delete(g->store, data_key, NULL);
        }
    }
    if (counted == NULL && done == g->world) counted = fulmen_dist_store_delete(g->store, key, NULL);
    free(blocks);
    free(mine);
    /* The first failure is the one to report. */
    if (e == NULL) return counted;
    fulmen_error_free(counted);
    return e;
}

static fulmen_error *sc_barrier(void *ud, void *group) {
    (void)ud;
    store_group *g = group;
    if (g->counts != NULL) g->counts->barrier++;
    /* Every rank publishes a token and waits for every rank's. */
    double token = 1;
    double *seen = sc_doubles((size_t)g->world, 1);
    if (seen == NULL) return sc_oom();
    fulmen_error *e = sc_round(g, &token, 1, seen, 0, g->world);
    free(seen);
    return e;
}

/* The slots (named "storecc"). */
static inline fulmen_collectives store_collectives_table(void) {
    fulmen_collectives c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.name = "storecc";
    c.group_new = sc_group_new;
    c.group_free = sc_group_free;
    c.all_reduce = sc_all_reduce;
    c.broadcast = sc_broadcast;
    c.all_gather = sc_all_gather;
    c.barrier = sc_barrier;
    c.reduce_scatter = sc_reduce_scatter;
    return c;
}

#endif
