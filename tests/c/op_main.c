/* op_main.c: runs the kernels tests/c/op_harness.c generated, with a guard
 * region before and after every buffer.
 *   op_main IN OUT N POS
 * IN holds the input buffers' bytes in table order; outputs and scratch
 * start as 0xff bytes (NaN as f32), so an element no kernel wrote stays
 * NaN. After the run every guard byte must still be the canary, else it
 * names the buffer and exits 3. OUT gets the output buffers in order. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct HBuf { const char *name; int esize; long long elems; int role; };
extern const int nbufs;
extern const struct HBuf hbufs[];
void run_ops(void **B, int64_t n, int64_t pos);

#define GUARD 256
#define CANARY 0xa5

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: op_main IN OUT N POS\n"); return 2; }
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) { perror("op_main"); return 2; }
    void **B = calloc((size_t)nbufs, sizeof *B);
    uint8_t **base = calloc((size_t)nbufs, sizeof *base);
    for (int i = 0; i < nbufs; i++) {
        size_t bytes = (size_t)hbufs[i].elems * (size_t)hbufs[i].esize;
        /* 64-byte aligned, so vector loads may assume 16 */
        base[i] = aligned_alloc(64, (GUARD + bytes + GUARD + 63) / 64 * 64);
        memset(base[i], CANARY, GUARD);
        memset(base[i] + GUARD + bytes, CANARY, GUARD);
        B[i] = base[i] + GUARD;
        if (hbufs[i].role == 0) {
            if (fread(B[i], 1, bytes, in) != bytes) { fprintf(stderr, "op_main: input file too short for %s\n", hbufs[i].name); return 2; }
        } else {
            memset(B[i], 0xff, bytes);
        }
    }
    run_ops(B, atoll(argv[3]), atoll(argv[4]));
    int bad = 0;
    for (int i = 0; i < nbufs; i++) {
        size_t bytes = (size_t)hbufs[i].elems * (size_t)hbufs[i].esize;
        for (size_t j = 0; j < GUARD; j++) {
            if (base[i][j] != CANARY) { fprintf(stderr, "guard before %s overwritten at byte -%zu\n", hbufs[i].name, GUARD - j); bad = 1; break; }
        }
        for (size_t j = 0; j < GUARD; j++) {
            if (base[i][GUARD + bytes + j] != CANARY) { fprintf(stderr, "guard after %s overwritten at byte +%zu\n", hbufs[i].name, j); bad = 1; break; }
        }
        if (hbufs[i].role == 1) fwrite(B[i], 1, bytes, out);
    }
    fclose(out);
    fclose(in);
    for (int i = 0; i < nbufs; i++) free(base[i]);
    free(base); free(B);
    return bad ? 3 : 0;
}
