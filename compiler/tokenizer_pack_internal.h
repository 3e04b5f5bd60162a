/* tokenizer_pack_internal.h: what the two packers share. tokenizer_pack.c
 * (tokenizer.json + tokenizer_config.json) and tokenizer_gguf.c (a GGUF file's
 * tokenizer.* metadata) each decide the tokenizer into a TokSpec and hand it to
 * one blob writer, so that the same tokenizer packs into the same bytes
 * whichever file it came from. They share the string -> id hash, GPT-2's byte
 * map and the chat template's check too. Only these two files include it. */
#ifndef LLMCC_TOKENIZER_PACK_INTERNAL_H
#define LLMCC_TOKENIZER_PACK_INTERNAL_H
#include "util.h"

/* ---- string -> id, open addressing (ids >= 0; id -1 marks an empty slot) ---- */
typedef struct { const char *s; size_t n; int32_t id; } HEnt;
typedef struct { HEnt *e; size_t mask; } Hash;
void tokhash_init(Arena *a, Hash *h, size_t n);               /* room for n strings */
HEnt *tokhash_slot(const Hash *h, const char *s, size_t n);   /* s's entry, or the empty one where it goes */
int32_t tokhash_get(const Hash *h, const char *s, size_t n);  /* -1 when absent */

/* ---- GPT-2's bytes_to_unicode, inverted ---- */
#define GPT2_UNMAP_SIZE 324                  /* code points 0..323 hold all 256 byte spellings */
void gpt2_unmap_table(int16_t *tab);         /* tab[GPT2_UNMAP_SIZE]: code point -> byte, or -1 */
/* A byte-level vocab spelling as raw bytes (out: n bytes of room); false when some character is not in
 * the byte map (such a token cannot come out of BPE: callers keep its text as it is). */
bool gpt2_unmap(const int16_t *tab, const char *s, size_t n, char *out, size_t *on);

/* ---- chat templates ---- */
typedef struct {
    uint32_t flags;                    /* TOKC_* */
    int32_t eot;                       /* the end-of-turn id, -1: none */
    const char *tpl; size_t tpl_len;   /* the Jinja source; tpl NULL: no chat section */
    const char *bos, *eos;             /* the texts the template gets as bos_token / eos_token (NULL: none) */
} ChatInfo;

/* Where a template and its tokens come from: the file and key that messages name, and how a token's text becomes
 * an id (added tokens before the model's vocabulary, as HF's AddedVocabulary looks them up). */
typedef struct {
    Arena *a;
    const char *path;                  /* the file holding the template */
    const char *tpl_key;               /* its key there (NULL: the file is the template) */
    int32_t (*lookup)(const void *ctx, const char *s, size_t n);   /* token text -> id, -1 when none */
    const void *ctx;
} ChatSource;
/* Checks tpl (n bytes, Jinja) or dies naming src; fills *ci with it, the token texts and the end-of-turn id
 * (eos_id where the template's turns end in no token). */
void chat_prepare(const ChatSource *src, const char *tpl, size_t n, const char *bos, const char *eos,
                  int32_t eos_id, ChatInfo *ci);
/* --chat-template FILE's text (a user error where it cannot be read) */
const char *chat_template_file(Arena *a, const char *path, size_t *len);

/* ---- the packed blob (runtime/tokenizer.h) ---- */
typedef struct {
    uint32_t model, flags, pre;        /* TOK_MODEL_*, TOKF_*, TOK_PRE_* */
    int32_t bos, eos, unk;             /* -1: none */
    uint32_t ntok;                     /* ids 0..ntok-1 */
    const char *const *str;            /* per id: its bytes (byte-level vocab: raw, the byte map undone) */
    const uint32_t *len;               /*   and their count (0: no such id) */
    const uint8_t *tflag;              /*   TOKT_* */
    uint32_t nmerge;
    const uint32_t *merges;            /* {left, right, result} ids per merge, in rank order */
    ChatInfo chat;                     /* tpl NULL: no chat section */
} TokSpec;
/* Writes the blob into the arena; a tokenizer too large for the format is a user error naming path / key. */
uint8_t *tokpack_write(Arena *a, const TokSpec *s, const char *path, const char *key, size_t *size);
#endif
