/* tokenizer.h: the one tokenizer of llmcc, shared by the compiler (llmcc
 * tokenize/detokenize, packing) and the emitted runtime. It works from a
 * compact packed blob (built by compiler/tokenizer_pack.c from tokenizer.json
 * and tokenizer_config.json) and needs no file at run time.
 * Models: byte-level BPE (Qwen2, Llama 3, GPT-2-style as SmolLM's) and
 * SentencePiece-style BPE with byte fallback (Llama 2, TinyLlama, llama2.c models;
 * the legacy Prepend/Replace normalizer or the Metaspace pre-tokenizer). */
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
    bool first_tok;             /* no token decoded yet (skipped ones aside): the Metaspace decoder's token 0 */
    unsigned char pend[8]; int npend;
} TokDecoder;
void tokdec_init(TokDecoder *d, const Tokenizer *t, bool show_special);
/* Appends up to cap bytes to out; returns the count written (a token yields at most 256 + 8 bytes). */
size_t tokdec_push(TokDecoder *d, int32_t id, char *out, size_t cap);
size_t tokdec_flush(TokDecoder *d, char *out, size_t cap);
/* Decodes a whole sequence into a malloc'd NUL-terminated string. */
char *tokenizer_decode(const Tokenizer *t, const int32_t *ids, int n, bool show_special);
/* ---- chat templates ----
 * The compiler recognises tokenizer_config.json's chat_template (by its
 * markers, or for Llama 3.1 / 3.2 as Meta's whole template; not with a Jinja
 * engine) as one of these families and packs the
 * family, its end-of-turn id and its default system prompt; rendering here
 * reproduces transformers' apply_chat_template(messages,
 * add_generation_prompt=True) text for system/user/assistant messages, and
 * the text is then encoded like any other (add_special_tokens=False, as
 * transformers does). */
#define TOK_CHAT_FAMILIES(X) \
    X(NONE, "none") \
    X(CHATML, "chatml")      /* Qwen2 / Qwen2.5: <|im_start|>role\n...<|im_end|>\n */ \
    X(LLAMA3, "llama3")      /* Llama 3 Instruct: <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */ \
    X(LLAMA31, "llama3.1")   /* Llama 3.1 / 3.2 Instruct: Llama 3 turns after a system turn that always */ \
                             /* opens "Cutting Knowledge Date: December 2023\nToday Date: DATE\n\n" */ \
    X(ZEPHYR, "zephyr")      /* TinyLlama / Zephyr: <|role|>\n...</s>\n */ \
    X(QWEN3, "qwen3")        /* Qwen3: ChatML without a default system prompt; an assistant turn's */ \
                             /* <think>reasoning</think> is dropped once a user speaks after it; */ \
                             /* enable_thinking=false opens the reply with an empty <think></think> */
#define X(e, s) TOK_CHAT_##e,
enum { TOK_CHAT_FAMILIES(X) TOK_CHAT_COUNT };
#undef X
enum {
    TOKC_TRIM = 1,           /* content goes through Jinja's |trim (Python str.strip) */
    TOKC_TODAY = 2,          /* LLAMA31: DATE is today's (3.2's strftime_now("%d %b %Y")), not "26 Jul 2024" (3.1) */
};
#define TOKC_ALL (TOKC_TRIM | TOKC_TODAY)
/* LLAMA31's DATE: this variable's value when it is set and not empty (what
 * passing date_string to apply_chat_template does; tests pin the date with it),
 * else with TOKC_TODAY the local date as transformers' strftime_now renders it
 * ("02 Dec 2026"), else "26 Jul 2024". */
#define TOK_CHAT_DATE_ENV "LLMCC_CHAT_DATE"
typedef struct { const char *role; const char *content; size_t len; } ChatMsg;
const char *tokenizer_chat_family_name(int family);
int tokenizer_chat_family(const Tokenizer *t);     /* TOK_CHAT_NONE when the blob has no template */
int tokenizer_chat_eot(const Tokenizer *t);        /* end-of-turn id, -1 when none */
/* The template's system prompt when the messages bring none; NULL when it has none. */
const char *tokenizer_chat_default_system(const Tokenizer *t, size_t *len);
/* Renders messages (roles "system", "user", "assistant"; tool calls and
 * tool / ipython messages are not supported: callers refuse them) into a malloc'd
 * string (*len bytes, NUL-terminated); NULL when out of memory or the blob
 * has no template. add_gen: end with the assistant header.
 * cont: the messages continue a conversation right after an assistant reply
 * whose end-of-turn token was sampled but not kept: the text starts with what
 * the template puts after an assistant's content and leaves out what comes
 * only once (BOS, the default system prompt).
 * think: the template's thinking switch (enable_thinking): 0 off, 1 on, -1 the template's
 * default (on); only QWEN3 has one. cont is not supported for QWEN3, whose template rewrites earlier turns:
 * render the whole conversation instead (tokenizer_chat_rewrites_history). */
#define TOK_THINK_DEFAULT (-1)
char *tokenizer_chat_render_think(const Tokenizer *t, const ChatMsg *m, int n, bool add_gen, bool cont, int think,
                                  size_t *len);
bool tokenizer_chat_has_thinking(const Tokenizer *t);       /* the template has enable_thinking */
bool tokenizer_chat_rewrites_history(const Tokenizer *t);   /* earlier turns render differently later */

/* ---- packed blob format (v2), shared with compiler/tokenizer_pack.c ----
 * All integers little-endian, nothing aligned:
 *   0  u32 magic TOK_MAGIC ("LTOK")     4  u32 version TOK_VERSION (1 is read too: no chat)
 *   8  u32 model (TOK_MODEL_*)         12  u32 flags (TOKF_*)
 *  16  u32 pre-tokenizer (TOK_PRE_*)   20  i32 bos   24 i32 eos   28 i32 unk (-1: none)
 *  32  u32 n (id space: ids 0..n-1)    36  u32 nmerge   40 u32 pool bytes   44 u32 chat bytes (v1: 0)
 *  48  u32 off[n+1]: token i is pool[off[i], off[i+1]) (empty: no such id).
 *      Byte-level vocab strings are stored as raw bytes (GPT-2 byte map undone).
 *      u8 tflag[n] (TOKT_*)
 *      nmerge x {u24 left, u24 right, u24 result}, in rank order
 *      pool
 *      chat (when chat bytes > 0): u32 family (TOK_CHAT_*), u32 flags (TOKC_*),
 *      i32 end-of-turn id, i32 bos_token id, i32 eos_token id (as tokenizer_config
 *      names them; -1: none), u32 default system length (UINT32_MAX: none), its bytes */
#define TOK_MAGIC 0x4B4F544Cu          /* "LTOK" */
#define TOK_VERSION 2u
#define TOK_CHAT_HEADER_SIZE 24u
#define TOK_HEADER_SIZE 48u
enum { TOK_MODEL_BYTELEVEL = 0, TOK_MODEL_SPM = 1 };
/* NONE: a segment is one pre-token; QWEN2 / LLAMA3: their Split regex; GPT2: ByteLevel's own
 * (use_regex) GPT-2 regex. TOKF_DIGITS and TOKF_PREFIX_SPACE go with NONE and GPT2 only.
 * META_*: SentencePiece-style only, without TOKF_SPM_NORM: Metaspace(replacement U+2581,
 * prepend_scheme always / first / never): spaces become U+2581, then a segment (text between
 * added tokens) not starting with U+2581 gets one prepended: always every segment, first only
 * the segment at the start of the input, never none. TOKF_META_SPLIT: split true. */
enum { TOK_PRE_NONE = 0, TOK_PRE_QWEN2 = 1, TOK_PRE_LLAMA3 = 2, TOK_PRE_GPT2 = 3,
       TOK_PRE_META_ALWAYS = 4, TOK_PRE_META_FIRST = 5, TOK_PRE_META_NEVER = 6 };
enum {
    TOKF_NFC = 1,             /* normalizer NFC */
    TOKF_IGNORE_MERGES = 2,   /* a pre-token found in the vocab is emitted whole */
    TOKF_ADD_BOS = 4, TOKF_ADD_EOS = 8,
    TOKF_BYTE_FALLBACK = 16,  /* unknown chars become <0xNN> tokens */
    TOKF_SPM_NORM = 32,       /* Prepend(U+2581) + Replace(" " -> U+2581) */
    TOKF_FUSE_UNK = 64,
    TOKF_STRIP_LEAD = 128,    /* decoder: Strip(" ", left 1) of the whole output */
    TOKF_DIGITS = 256,        /* a Digits pre-tokenizer first: each numeric character its own piece */
    TOKF_DIGIT_RUNS = 512,    /* with TOKF_DIGITS: runs of numeric characters instead (individual_digits false) */
    TOKF_PREFIX_SPACE = 1024, /* ByteLevel's add_prefix_space: a piece not starting with ' ' gets one */
    TOKF_META_SPLIT = 2048,   /* Metaspace split: each U+2581 starts a new pre-token (it stays in front) */
    /* decoder (SentencePiece-style): Metaspace instead of [Replace, ByteFallback, Fuse, Strip] */
    TOKF_DEC_NO_BYTES = 4096, /* no ByteFallback: a <0xNN> token decodes as its own text */
    TOKF_DEC_META_FIRST = 8192, /* the first token's U+2581 are dropped, not turned into spaces */
};
#define TOKF_ALL 16383u
enum { TOKT_SPECIAL = 1, TOKT_ADDED = 2, TOKT_VOCAB = 4 };
/* Worst-case bytes one tokdec_push can produce for this tokenizer. */
size_t tokenizer_max_piece_bytes(const Tokenizer *t);
#endif
