/*
 * Saving a model's weights: fulmen_model_save of a stack of six 4096x4096
 * linear layers (100.7M float32 parameters, 403 MB) in one format, the
 * best of N saves, then the process's peak RSS (which bench/save.py reads
 * from wait4, with the same model saved by torch.save and safetensors'
 * save_file beside it).
 *
 *   save_bench FILE [REPEATS]   FILE ending .pt / .pth: torch.save's format;
 *                               anything else: safetensors
 */
#define _POSIX_C_SOURCE 200809L
#include <fulmen.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void check(fulmen_error *e, const char *what) {
    if (e == NULL) return;
    fprintf(stderr, "save_bench: %s: %s\n", what, fulmen_error_message(e));
    exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: save_bench FILE [REPEATS]\n");
        return 2;
    }
    int repeats = argc > 2 ? atoi(argv[2]) : 3;
    check(fulmen_set_num_threads(1), "threads");
    check(fulmen_manual_seed(0), "seed");
    fulmen_model *model = NULL;
    check(fulmen_model_sequential_new(&model), "sequential");
    for (int i = 0; i < 6; i++) {
        fulmen_model *layer = NULL;
        check(fulmen_model_linear_new(4096, 4096, true, &layer), "linear");
        check(fulmen_model_push(model, layer), "push");
    }
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        double start = now();
        check(fulmen_model_save(model, argv[1]), "save");
        double took = now() - start;
        if (took < best) best = took;
    }
    printf("best_s %.4f\n", best);
    fulmen_model_free(model);
    return 0;
}
