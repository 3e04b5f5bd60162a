/* fuzz_encoder.c: libFuzzer harness for the encoder and decoder
 * (runtime/tokenizer.c). At start it packs the real tokenizers named by
 * $LLMCC_FUZZ_TOKDIRS (directories with tokenizer.json, ':'-separated;
 * `make fuzz` passes Qwen2.5, Llama 3, a SentencePiece one and the GPT-2-style
 * fixture with Digits, without and with add_prefix_space). Input byte 0
 * picks the tokenizer and add_special; the rest is the text (any bytes).
 * Checks: ids inside the vocabulary; streaming decode equals whole decode. */
#include "fuzz_common.h"
#include "tokenizer_pack.h"
#include "tokenizer.h"

#define MAX_TOK 8
static Tokenizer *toks[MAX_TOK];
static int ntoks;
static Arena ta;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *dirs = getenv("LLMCC_FUZZ_TOKDIRS");
    if (!dirs || !*dirs) { fprintf(stderr, "fuzz_encoder: set LLMCC_FUZZ_TOKDIRS=DIR[:DIR...] (tokenizer.json dirs)\n"); exit(2); }
    char *copy = strdup(dirs);
    for (char *d = strtok(copy, ":"); d && ntoks < MAX_TOK; d = strtok(NULL, ":")) {
        size_t bs;
        uint8_t *blob = tokenizer_pack(&ta, d, &bs);
        if (!blob) { fprintf(stderr, "fuzz_encoder: %s has no tokenizer.json\n", d); exit(2); }
        const char *err = tokenizer_load(&toks[ntoks], blob, bs);
        if (err) { fprintf(stderr, "fuzz_encoder: %s: %s\n", d, err); exit(2); }
        ntoks++;
    }
    free(copy);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || !ntoks) return 0;
    const Tokenizer *t = toks[data[0] % ntoks];
    bool special = (data[0] / ntoks) & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids;
    int n = tokenizer_encode(t, text, len, special, &ids);
    if (n < 0) fz_fail("negative id count", "");
    int V = tokenizer_vocab_size(t);
    for (int i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= V) fz_fail("id outside the vocabulary", "");
    bool show = (data[0] / ntoks) & 2;
    char *whole = tokenizer_decode(t, ids, n, show);
    TokDecoder d;
    tokdec_init(&d, t, show);
    size_t cap = tokenizer_max_piece_bytes(t) * ((size_t)n + 1) + 16, k = 0;
    char *buf = malloc(cap);
    for (int i = 0; i < n; i++) k += tokdec_push(&d, ids[i], buf + k, cap - k);
    k += tokdec_flush(&d, buf + k, cap - k);
    /* tokenizer_decode's result is NUL-terminated and the text may hold NULs: compare up to the first */
    size_t wl = strlen(whole);
    if (k < wl || memcmp(whole, buf, wl) != 0 || (k > wl && buf[wl] != 0))
        fz_fail("streaming decode differs from whole decode", whole);
    free(buf);
    free(whole);
    free(ids);
    return 0;
}
