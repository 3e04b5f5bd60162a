/* fuzz_grammar.c: libFuzzer harness for runtime/grammar.c, whose GBNF comes from requests ("grammar"): the input
 * is a grammar. It must be refused with a one-line reason ("line L, column C: ...") or compiled; a compiled one is
 * then driven through 32 steps over a small vocabulary (every byte, a few words, a special and a stop token):
 * each step's mask equal to the brute force's, a random allowed token accepted. No crash, leak or hang. */
#include "grammar.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "FUZZ CHECK FAILED: %s: %s\n", what, detail);
    abort();
}

#define N_WORDS 8
static const char *const words[N_WORDS] = {"ab", "{\"", "\": ", "true", "\xc3\xa9", "12", "<s>", "</s>"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;   /* requests' grammars are bounded by --max-body; 4 KiB finds the same bugs faster */
    char err[512];
    err[0] = 0;
    Grammar *g = grammar_compile((const char *)data, size, err, sizeof err);
    if (!g) {
        if (!err[0] || strchr(err, '\n')) fail("a refusal without a one-line reason", err);
        return 0;
    }
    static GrammarVocab *v;
    static uint8_t bytes[256];
    if (!v) {
        enum { N = 256 + N_WORDS };
        static const uint8_t *tok[N];
        static int lens[N];
        static bool special[N];
        for (int b = 0; b < 256; b++) { bytes[b] = (uint8_t)b; tok[b] = &bytes[b]; lens[b] = 1; }
        for (int w = 0; w < N_WORDS; w++) {
            tok[256 + w] = (const uint8_t *)words[w];
            lens[256 + w] = (int)strlen(words[w]);
        }
        special[256 + 6] = special[256 + 7] = true;
        int32_t stop = 256 + 7;
        v = grammar_vocab_new(N, tok, lens, special, &stop, 1);
        if (!v) fail("vocabulary", "out of memory");
    }
    uint64_t brute[(256 + N_WORDS + 63) / 64];
    GrammarState s = grammar_start(g);
    unsigned pick = size ? data[0] : 0;
    for (int step = 0; step < 32; step++) {
        const uint64_t *mask = grammar_mask(&s, v);
        if (!mask) break;   /* past the grammar's bounds: refused as out of memory */
        grammar_mask_brute(&s, v, brute);
        if (!grammar_ok(g)) break;   /* the brute force went past the bound itself: nothing to compare */
        int allowed[256 + N_WORDS], k = 0;
        for (int t = 0; t < 256 + N_WORDS; t++) {
            bool a = mask[t >> 6] >> (t & 63) & 1;
            if (a != (bool)(brute[t >> 6] >> (t & 63) & 1)) fail("mask and brute force differ", "");
            if (a && t != 256 + 7) allowed[k++] = t;
        }
        if (!k) break;
        pick = pick * 1103515245u + 12345u;
        if (!grammar_accept_token(&s, v, allowed[(pick >> 8) % (unsigned)k])) fail("an allowed token refused", "");
    }
    grammar_free(g);
    return 0;
}
