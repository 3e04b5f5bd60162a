/* mk_payload.c: writes the payload of the mock bigram model with pack_payload_ex.
 *   mk_payload OUT [TOKBLOB]
 * The table is pseudo-random (fixed LCG) with a few forced transitions the
 * tests rely on: 5 -> 6 -> 7 -> EOS (2). */
#include "pack.h"
#include "payload.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>

#define V 300

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) { fprintf(stderr, "usage: mk_payload OUT [TOKBLOB]\n"); return 1; }
    float *w = xmalloc((size_t)V * V * sizeof *w);
    uint64_t s = 12345;
    for (int i = 0; i < V * V; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (float)((s >> 40) / 16777216.0 * 8.0 - 4.0);   /* [-4, 4) */
    }
    w[5 * V + 6] = 10; w[6 * V + 7] = 10; w[7 * V + 2] = 10;
    uint8_t *blob = NULL;
    size_t blen = 0;
    if (argc == 3) {
        blob = (uint8_t *)read_file(argv[2], &blen);
        if (!blob) die_user(argv[2], NULL, "cannot read");
    }
    PackTensor t = { .name = "bigram.weight", .dtype = PDT_F32, .ndim = 2, .shape = { V, V },
                     .data = w, .nbytes = (size_t)V * V * sizeof *w };
    pack_payload_ex(argv[1], &t, NULL, 1, blob, blen);
    free(w);
    free(blob);
    return 0;
}
