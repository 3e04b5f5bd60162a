/* tokenizer.h: the one tokenizer of llmcc, shared by the compiler (llmcc
 * tokenize/detokenize, packing) and the emitted runtime. It works from a
 * compact packed blob (built by compiler/tokenizer_pack.c from tokenizer.json
 * and tokenizer_config.json) and needs no file at run time.
 * Models: byte-level BPE (Qwen2, Llama 3) and SentencePiece-style BPE with
 * byte fallback (Llama 2, TinyLlama, llama2.c models). */
#ifndef LLMCC_TOKENIZER_H
#define LLMCC_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Tokenizer Tokenizer;

/* Binds a packed blob (not copied: it must outlive the tokenizer).
 * Returns NULL on success, else a one-line message. */
const char *tokenizer_load(Tokenizer **out, const uint8_t *blob, size_t size);
void tokenizer_free(Tokenizer *t);

int tokenizer_vocab_size(const Tokenizer *t);   /* ids >= this decode to nothing */
int tokenizer_bos_id(const Tokenizer *t);       /* -1 when none */
int tokenizer_eos_id(const Tokenizer *t);       /* -1 when none */
bool tokenizer_is_special(const Tokenizer *t, int id);
/* Id of an exact token string (added tokens included), -1 if none. */
int tokenizer_token_id(const Tokenizer *t, const char *s);

/* Encodes len bytes of text (need not be valid UTF-8). add_special: add
 * BOS/EOS as tokenizer.json's post-processor says (add_special_tokens=True).
 * Returns the number of ids and a malloc'd array in *ids. */
int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids);

/* Streaming decoder: feed ids one at a time, get bytes that are complete
 * UTF-8 (a character split across tokens is held back until it completes;
 * invalid sequences come out as U+FFFD). Special tokens give no text unless
 * show_special. */
typedef struct {
    const Tokenizer *t;
    bool show_special;
    bool first;                 /* SentencePiece: strip the leading space of the first piece */
    unsigned char pend[8]; int npend;
} TokDecoder;
void tokdec_init(TokDecoder *d, const Tokenizer *t, bool show_special);
/* Appends up to cap bytes to out; returns the count written (a token yields at most 256 + 8 bytes). */
size_t tokdec_push(TokDecoder *d, int32_t id, char *out, size_t cap);
size_t tokdec_flush(TokDecoder *d, char *out, size_t cap);
/* Decodes a whole sequence into a malloc'd NUL-terminated string. */
char *tokenizer_decode(const Tokenizer *t, const int32_t *ids, int n, bool show_special);
#endif
