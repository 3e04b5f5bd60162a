/* fuzz_common.h: what every libFuzzer harness in tests/fuzz/ shares. The
 * loaders report bad input through die_user, which exits; here die_user_hook
 * longjmps back to the harness instead, after checking the message has the
 * promised shape (one line, "llmcc: ..."). The loaders take paths, so the
 * input is written to a per-process directory on tmpfs (/dev/shm). Each
 * harness is also linked with replay_main.c (gcc, no libFuzzer) so that
 * `make test` replays the seed corpora and every kept crash. */
#ifndef LLMCC_FUZZ_COMMON_H
#define LLMCC_FUZZ_COMMON_H
#include "util.h"
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static jmp_buf fz_jmp __attribute__((unused));
static const char *fz_must_name __attribute__((unused));   /* the message must contain this (a file path), or NULL */
static char fz_last[4096] __attribute__((unused));          /* the last user-error line */

static inline void fz_fail(const char *what, const char *line) {
    fprintf(stderr, "FUZZ CHECK FAILED: %s\n  %s\n", what, line);
    abort();
}

static inline void fz_hook(const char *line) {
    if (strncmp(line, "llmcc: ", 7) != 0) fz_fail("message does not start with 'llmcc: '", line);
    for (const char *p = line; *p; p++)
        if ((unsigned char)*p < 0x20) fz_fail("message has a control character (not one line)", line);
    if (fz_must_name && !strstr(line, fz_must_name)) fz_fail("message does not name the file", line);
    snprintf(fz_last, sizeof fz_last, "%s", line);
    longjmp(fz_jmp, 1);
}

static char fz_dirbuf[256] __attribute__((unused));

static inline void fz_cleanup(void) {
    static const char *const names[] = {"model.safetensors", "config.json", "generation_config.json",
                                        "tokenizer.json", "tokenizer_config.json", "model.gguf"};
    char p[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", fz_dirbuf, names[i]);
        unlink(p);
    }
    rmdir(fz_dirbuf);
}

/* A fresh directory per process: /dev/shm/llmcc-fuzz-PID (or $TMPDIR), removed at exit. */
static inline const char *fz_dir(void) {
    if (!fz_dirbuf[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        snprintf(fz_dirbuf, sizeof fz_dirbuf, "%s/llmcc-fuzz-%d", base, (int)getpid());
        mkdir(fz_dirbuf, 0700);
        atexit(fz_cleanup);
        die_user_hook = fz_hook;
    }
    return fz_dirbuf;
}

/* Writes data to DIR/name (or removes DIR/name when data is NULL); returns the path (static per name slot). */
static inline const char *fz_put(int slot, const char *name, const void *data, size_t n) {
    static char paths[4][512];
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", fz_dir(), name);
    if (!data) { unlink(paths[slot]); return paths[slot]; }
    FILE *f = fopen(paths[slot], "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) { perror(paths[slot]); abort(); }
    return paths[slot];
}

/* Splits data at the first NUL: part 1 before, part 2 after (absent when no NUL). */
static inline void fz_split(const uint8_t *data, size_t size, size_t *n1, const uint8_t **p2, size_t *n2) {
    const uint8_t *z = memchr(data, 0, size);
    if (!z) { *n1 = size; *p2 = NULL; *n2 = 0; return; }
    *n1 = (size_t)(z - data); *p2 = z + 1; *n2 = size - *n1 - 1;
}
#endif
