/* fuzz_tok.h: the check the tokenizer harnesses share: a loaded tokenizer
 * encodes a fixed text of mixed scripts, spaces and an invalid byte to ids
 * inside its vocabulary, and decodes them again, then is freed. */
#ifndef LLMCC_FUZZ_TOK_H
#define LLMCC_FUZZ_TOK_H
#include "fuzz_common.h"
#include "tokenizer.h"

static inline void fz_encode_check_free(Tokenizer *t) {
    static const char text[] = "Hello, world! 123 \xC3\xA9t\xC3\xA9  <s>\n\tx \xF0\x9F\x98\x80 \xFF end";
    int32_t *ids;
    int n = tokenizer_encode(t, text, sizeof text - 1, true, &ids);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t)) fz_fail("encode gave an id outside the vocabulary", text);
    free(tokenizer_decode(t, ids, n, true));
    free(ids);
    tokenizer_free(t);
}
#endif
