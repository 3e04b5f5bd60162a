/* fuzz_tokblob.c: libFuzzer harness for the packed tokenizer blob parser
 * (tokenizer_load in runtime/tokenizer.c; format in runtime/tokenizer.h):
 * the input is a blob. It must be rejected with a message or loaded; a loaded
 * one must encode and decode a fixed text with ids inside the vocabulary.
 * (In an executable the blob sits under the payload checksum; this guards
 * the validation itself.) */
#include "fuzz_common.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Tokenizer *t;
    const char *err = tokenizer_load(&t, data, size);
    if (err) {
        if (!*err || strchr(err, '\n')) fz_fail("bad load message", err);
        return 0;
    }
    static const char text[] = "Hello, world! 123 \xC3\xA9t\xC3\xA9  \n\tx \xF0\x9F\x98\x80 \xFF end";
    int32_t *ids;
    int n = tokenizer_encode(t, text, sizeof text - 1, true, &ids);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t)) fz_fail("encode gave an id outside the vocabulary", text);
    free(tokenizer_decode(t, ids, n, true));
    free(ids);
    tokenizer_free(t);
    return 0;
}
