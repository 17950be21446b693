/*
 * Processes of a multi-process C test: each scenario runs as a child
 * process of the test program itself (`SELF SCENARIO DIR [ARG]`), alone
 * or as the ranks of a job started with torchrun's variables on a free
 * loopback port. Include after check.h, with _XOPEN_SOURCE 700.
 */
#ifndef FULMEN_TEST_RANKS_H
#define FULMEN_TEST_RANKS_H

#include "check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Starts `self SCENARIO DIR [ARG]` with the `env` entries (NULL-ended;
 * may be NULL) added to this process's environment. */
static inline pid_t ranks_start(const char *self, const char *scenario, const char *dir, const char *arg,
                                char *const *env) {
    pid_t pid = fork();
    if (pid == 0) {
        for (char *const *kv = env; kv != NULL && *kv != NULL; kv++) putenv(*kv);
        execl(self, self, scenario, dir, arg, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits for `pid` up to `seconds`; returns its exit status (-1 on timeout,
 * after killing it; 128 + signal when killed by one). */
static inline int ranks_finish(pid_t pid, int seconds) {
    for (int i = 0; i < seconds * 20; i++) {
        int status = 0;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* A port no process listens on now, as the kernel picks one for a
 * listener on port 0 (the launcher's way): nothing else on the machine
 * (another run of this test, another suite) is handed the same one. */
static inline int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        port = ntohs(a.sin_port);
    }
    close(fd);
    CHECK(port > 0);
    return port;
}

/* Runs `world` (at most 4) ranks of `self SCENARIO DIR` with torchrun's
 * variables, on one node or (`node_per_rank`) each on a node of its own,
 * and waits up to 300 s for each; `codes[r]` gets rank r's exit status. */
static inline void ranks_run_torchrun(const char *self, const char *scenario, const char *dir, int world, int port,
                                      int *codes, bool node_per_rank) {
    pid_t pids[4];
    static char vars[4][6][64];
    CHECK(world <= 4);
    for (int r = 0; r < world && r < 4; r++) {
        snprintf(vars[r][0], 64, "RANK=%d", r);
        snprintf(vars[r][1], 64, "LOCAL_RANK=%d", node_per_rank ? 0 : r);
        snprintf(vars[r][2], 64, "WORLD_SIZE=%d", world);
        snprintf(vars[r][3], 64, "LOCAL_WORLD_SIZE=%d", node_per_rank ? 1 : world);
        snprintf(vars[r][4], 64, "MASTER_PORT=%d", port);
        snprintf(vars[r][5], 64, "GROUP_RANK=%d", node_per_rank ? r : 0);
        char *env[] = {vars[r][0], vars[r][1], vars[r][2], vars[r][3], vars[r][4], vars[r][5], "MASTER_ADDR=127.0.0.1",
                       "OMP_NUM_THREADS=1", NULL};
        pids[r] = ranks_start(self, scenario, dir, NULL, env);
    }
    for (int r = 0; r < world && r < 4; r++) codes[r] = ranks_finish(pids[r], 300);
}

#endif
