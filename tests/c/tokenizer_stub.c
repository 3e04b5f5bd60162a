/* tokenizer_stub.c: stands in for runtime/tokenizer.c in the runtime tests
 * while that file does not exist yet. Loads nothing. */
#include "tokenizer.h"
#include <stdlib.h>
const char *tokenizer_load(Tokenizer **out, const uint8_t *blob, size_t size) {
    (void)blob; (void)size; *out = NULL; return "tokenizer not available (stub)";
}
void tokenizer_free(Tokenizer *t) { (void)t; }
int tokenizer_vocab_size(const Tokenizer *t) { (void)t; return 0; }
int tokenizer_bos_id(const Tokenizer *t) { (void)t; return -1; }
int tokenizer_eos_id(const Tokenizer *t) { (void)t; return -1; }
bool tokenizer_is_special(const Tokenizer *t, int id) { (void)t; (void)id; return false; }
int tokenizer_token_id(const Tokenizer *t, const char *s) { (void)t; (void)s; return -1; }
int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids) {
    (void)t; (void)text; (void)len; (void)add_special; *ids = NULL; return 0;
}
void tokdec_init(TokDecoder *d, const Tokenizer *t, bool show_special) { d->t = t; d->show_special = show_special; d->first = true; d->npend = 0; }
size_t tokdec_push(TokDecoder *d, int32_t id, char *out, size_t cap) { (void)d; (void)id; (void)out; (void)cap; return 0; }
size_t tokdec_flush(TokDecoder *d, char *out, size_t cap) { (void)d; (void)out; (void)cap; return 0; }
char *tokenizer_decode(const Tokenizer *t, const int32_t *ids, int n, bool show_special) {
    (void)t; (void)ids; (void)n; (void)show_special; return calloc(1, 1);
}
size_t tokenizer_max_piece_bytes(const Tokenizer *t) { (void)t; return 0; }
