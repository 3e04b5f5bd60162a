/* fuzz_tokblob.c: libFuzzer harness for the packed tokenizer blob parser
 * (tokenizer_load in runtime/tokenizer.c; format in runtime/tokenizer.h):
 * the input is a blob. It must be rejected with a message or loaded; a loaded
 * one must encode and decode a fixed text with ids inside the vocabulary.
 * (In an executable the blob sits under the payload checksum; this guards
 * the validation itself.) */
#include "fuzz_tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Tokenizer *t;
    const char *err = tokenizer_load(&t, data, size);
    if (err) {
        if (!*err || strchr(err, '\n')) fz_fail("bad load message", err);
        return 0;
    }
    fz_encode_check_free(t);
    return 0;
}
