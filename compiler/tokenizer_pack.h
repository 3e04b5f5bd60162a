/* tokenizer_pack.h: tokenizer.json (+ tokenizer_config.json), or a GGUF
 * file's tokenizer.* metadata, -> the packed blob that runtime/tokenizer.c
 * reads (format: runtime/tokenizer.h). */
#ifndef LLMCC_TOKENIZER_PACK_H
#define LLMCC_TOKENIZER_PACK_H
#include "gguf.h"
#include "util.h"

/* Returns the blob (in the arena) and its size, or NULL when DIR has no
 * tokenizer.json. Unsupported or malformed input is a user error. */
uint8_t *tokenizer_pack(Arena *a, const char *dir, size_t *size);
/* no_chat: leave the checkpoint's chat template out (llmcc build --no-chat); chat_template: a file whose
 * template replaces it (--chat-template FILE); otherwise a template that is not Jinja llmcc reads is a user error. */
typedef struct { bool no_chat; const char *chat_template; } TokPackOpts;
uint8_t *tokenizer_pack_opts(Arena *a, const char *dir, const TokPackOpts *opts, size_t *size);
/* The same from an opened GGUF file (compiler/tokenizer_gguf.c; path names it in messages): the blob
 * tokenizer_pack_opts writes for the tokenizer.json it was converted from. NULL when the file has no
 * tokenizer (tokenizer.ggml.model absent or "none"). */
uint8_t *tokenizer_pack_gguf(Arena *a, const GgufFile *g, const char *path, const TokPackOpts *opts, size_t *size);

/* llmcc tokenize / detokenize (compiler/cmd_tokenize.c). */
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
/* llmcc chat-template (compiler/cmd_chat_template.c) */
int cmd_chat_template(int argc, char **argv);
#endif
