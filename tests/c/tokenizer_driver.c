/* tokenizer_driver.c: test driver for runtime/tokenizer.c + compiler/tokenizer_pack.c
 * (and compiler/tokenizer_gguf.c: DIR may be a GGUF file, chosen as llmcc tokenize chooses).
 *   DRV DIR info                 sizes, ids, load time
 *   DRV DIR encode [--no-special] < records   records: u32 LE length + bytes;
 *        prints per record "ids<TAB>R" where R is 1 when decode(ids) with
 *        special tokens shown equals the input byte for byte; streaming
 *        decode one id at a time must equal the whole-sequence decode.
 *   DRV DIR decode ID...         decoded text (special tokens hidden)
 *   DRV DIR decode-lines [--show-special] < lines of ids   one record (u32 LE
 *        length + bytes) of decoded text per line
 *   DRV DIR bench FILE           encoding speed in MB/s
 *   DRV DIR fuzz N               N corrupted blobs must load or fail cleanly */
#include "tokenizer_pack.h"
#include "tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static char *stream_decode(const Tokenizer *t, const int32_t *ids, int n, bool show, size_t *len) {
    TokDecoder d;
    tokdec_init(&d, t, show);
    size_t cap = tokenizer_max_piece_bytes(t) * (size_t)(n + 1) + 16, k = 0;
    char *buf = xmalloc(cap);
    for (int i = 0; i < n; i++) k += tokdec_push(&d, ids[i], buf + k, cap - k);
    k += tokdec_flush(&d, buf + k, cap - k);
    buf[k] = 0;
    *len = k;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: see source\n"); return 2; }
    Arena a = {0};
    size_t size;
    double t0 = now();
    uint8_t *blob;
    if (gguf_is_gguf_path(argv[1])) {
        GgufFile g = {0};
        gguf_open(&a, argv[1], &g);
        blob = tokenizer_pack_gguf(&a, &g, argv[1], NULL, &size);
        gguf_close(&g);
    } else blob = tokenizer_pack(&a, argv[1], &size);
    double t1 = now();
    if (!blob) { fprintf(stderr, "no tokenizer.json\n"); arena_free(&a); return 3; }
    Tokenizer *t;
    const char *err = tokenizer_load(&t, blob, size);
    double t2 = now();
    if (err) { fprintf(stderr, "load: %s\n", err); arena_free(&a); return 4; }
    const char *mode = argv[2];
    if (!strcmp(mode, "info")) {
        printf("blob_bytes %zu\nvocab %d\nbos %d\neos %d\npack_ms %.1f\nload_ms %.2f\n", size, tokenizer_vocab_size(t),
               tokenizer_bos_id(t), tokenizer_eos_id(t), (t1 - t0) * 1e3, (t2 - t1) * 1e3);
        double t3 = now();
        for (int i = 0; i < 10; i++) { Tokenizer *u; tokenizer_load(&u, blob, size); tokenizer_free(u); }
        printf("load_ms_avg %.2f\n", (now() - t3) * 100);
    } else if (!strcmp(mode, "encode")) {
        bool special = !(argc > 3 && !strcmp(argv[3], "--no-special"));
        unsigned char hdr[4];
        while (fread(hdr, 1, 4, stdin) == 4) {
            size_t n = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
            char *s = xmalloc(n + 1);
            if (fread(s, 1, n, stdin) != n) { fprintf(stderr, "short record\n"); return 5; }
            int32_t *ids;
            int k = tokenizer_encode(t, s, n, special, &ids);
            if (k < 0) { fprintf(stderr, "encode failed\n"); return 6; }
            for (int i = 0; i < k; i++) printf(i ? " %d" : "%d", ids[i]);
            char *d = tokenizer_decode(t, ids, k, true);
            size_t sl;
            char *sd = stream_decode(t, ids, k, true, &sl);
            /* the decoded text may hold NUL bytes: the streaming length is the reference */
            if (memcmp(sd, d, sl) || d[sl]) { fprintf(stderr, "streaming decode differs\n"); return 7; }
            printf("\t%d\n", sl == n && memcmp(d, s, n) == 0);
            free(d); free(sd); free(ids); free(s);
        }
    } else if (!strcmp(mode, "decode")) {
        int n = argc - 3;
        int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
        for (int i = 0; i < n; i++) ids[i] = atoi(argv[3 + i]);
        char *d = tokenizer_decode(t, ids, n, false);
        fputs(d, stdout);
        free(d); free(ids);
    } else if (!strcmp(mode, "decode-lines")) {
        bool show = argc > 3 && !strcmp(argv[3], "--show-special");
        char *line = NULL;
        size_t lcap = 0;
        ssize_t ll;
        while ((ll = getline(&line, &lcap, stdin)) >= 0) {
            int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)(ll + 1));
            int n = 0;
            for (char *q = line, *end; ; q = end) {
                long v = strtol(q, &end, 10);
                if (end == q) break;
                ids[n++] = (int32_t)v;
            }
            char *d = tokenizer_decode(t, ids, n, show);
            uint32_t dl = (uint32_t)strlen(d);
            unsigned char h[4] = { (unsigned char)dl, (unsigned char)(dl >> 8), (unsigned char)(dl >> 16), (unsigned char)(dl >> 24) };
            fwrite(h, 1, 4, stdout); fwrite(d, 1, dl, stdout);
            free(d); free(ids);
        }
        free(line);
    } else if (!strcmp(mode, "bench") && argc > 3) {
        size_t n;
        char *s = read_file(argv[3], &n);
        if (!s) { perror(argv[3]); return 5; }
        int32_t *ids;
        int k = 0, reps = 0;
        double b0 = now(), el;
        do { free(k ? ids : NULL); k = tokenizer_encode(t, s, n, false, &ids); reps++; el = now() - b0; } while (el < 1.0);
        printf("%.1f MB/s (%d tokens, %zu bytes, %d reps)\n", (double)n * reps / el / 1e6, k, n, reps);
        free(ids); free(s);
    } else if (!strcmp(mode, "fuzz") && argc > 3) {
        int iters = atoi(argv[3]), ok = 0;
        uint8_t *b = xmalloc(size);
        srand(12345);
        for (int it = 0; it < iters; it++) {
            memcpy(b, blob, size);
            size_t sz = size;
            int kind = rand() % 4;
            if (kind == 0) sz = (size_t)rand() % size;               /* truncated */
            else {
                int nflip = 1 + rand() % 8;
                for (int f = 0; f < nflip; f++) {
                    size_t pos = kind == 1 ? (size_t)rand() % 48 : kind == 2 ? (size_t)rand() % (size < 4096 ? size : 4096) : (size_t)(((uint64_t)rand() << 16 ^ (uint64_t)rand()) % size);
                    b[pos] = (uint8_t)rand();
                }
            }
            Tokenizer *u;
            if (tokenizer_load(&u, b, sz) == NULL) {
                ok++;
                static const char txt[] = "Hello <|im_start|> world's 12345 \xff\xfe \xe4\xbd\xa0\xe5\xa5\xbd\n\n  x";
                int32_t *ids;
                int k = tokenizer_encode(u, txt, sizeof txt - 1, true, &ids);
                if (k >= 0) {
                    for (int i = 0; i < k; i++) if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(u)) { fprintf(stderr, "bad id\n"); return 8; }
                    char *d = tokenizer_decode(u, ids, k, true);
                    free(d); free(ids);
                }
                tokenizer_free(u);
            }
        }
        printf("fuzz %d iterations, %d loaded\n", iters, ok);
        free(b);
    } else { fprintf(stderr, "unknown mode %s\n", mode); return 2; }
    tokenizer_free(t);
    arena_free(&a);
    return 0;
}
