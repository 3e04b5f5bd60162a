/* replay_main.c: runs a libFuzzer harness without libFuzzer, once per file
 * named on the command line (tests/test_fuzz_regressions.py). Prints one
 * line per input; a crash or failed check aborts with a non-zero status. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) { perror(argv[i]); return 2; }
        size_t cap = 1 << 16, n = 0;
        uint8_t *buf = malloc(cap);
        for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
            n += r;
            if (n == cap) buf = realloc(buf, cap *= 2);
        }
        fclose(f);
        if (!buf) { fprintf(stderr, "out of memory\n"); return 2; }
        /* an exact-size copy, so that ASan sees reads past the input's end */
        uint8_t *exact = malloc(n ? n : 1);
        for (size_t k = 0; k < n; k++) exact[k] = buf[k];
        free(buf);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
        printf("ok %s\n", argv[i]);
    }
    return 0;
}
