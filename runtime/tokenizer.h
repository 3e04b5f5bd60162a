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
/* Token id's bytes as they come out in the middle of a text (SentencePiece's U+2581 a space, <0xNN> its byte;
 * byte-level BPE's bytes), at most tokenizer_max_piece_bytes into out; *special: a control token, whose text is
 * not output. For a grammar's view of the vocabulary (grammar.h). */
size_t tokenizer_token_bytes(const Tokenizer *t, int32_t id, char *out, bool *special);
/* Decodes a whole sequence into a malloc'd NUL-terminated string. */
char *tokenizer_decode(const Tokenizer *t, const int32_t *ids, int n, bool show_special);
/* ---- chat templates ----
 * The checkpoint's own chat template (Jinja source), checked by the compiler and run here by runtime/jinja.c as
 * transformers' apply_chat_template runs it: the variables are messages, tools, documents (none),
 * add_generation_prompt, bos_token and eos_token (the texts tokenizer_config names), then extra keyword
 * arguments (chat_template_kwargs: enable_thinking, ...). The text is then encoded like any other
 * (add_special_tokens=False, as transformers does). The end-of-turn id is what the template writes after an
 * assistant's message (the compiler renders a probe conversation to find it). */
/* date_string for the template (Llama 3.x's system turn) when this variable is set and not empty: what passing
 * date_string to apply_chat_template does; tests pin the date with it */
#define TOK_CHAT_DATE_ENV "LLMCC_CHAT_DATE"
enum { TOKC_THINKING = 1 };   /* the template reads enable_thinking */
#define TOKC_ALL TOKC_THINKING
typedef struct { const char *role; const char *content; size_t len; } ChatMsg;
bool tokenizer_has_chat(const Tokenizer *t);       /* the blob holds a chat template */
int tokenizer_chat_eot(const Tokenizer *t);        /* end-of-turn id, -1 when none */
bool tokenizer_chat_has_thinking(const Tokenizer *t);
size_t tokenizer_chat_template_size(const Tokenizer *t);   /* bytes of its Jinja source */
/* What the template renders, malloc'd (*len bytes, NUL-terminated), or NULL with a one-line reason in err
 * (the template's own message where it raised: "line N: raise_exception: ..."). messages: a JSON list as
 * OpenAI's; tools: a JSON list or NULL (none); kwargs: a JSON object of more variables or NULL; think: 0 or 1
 * passes enable_thinking (before kwargs, which may override it), -1 leaves it to the template. */
typedef struct {
    const char *messages; size_t messages_len;
    const char *tools; size_t tools_len;
    const char *kwargs; size_t kwargs_len;
    bool add_generation_prompt;
    int think;
} ChatRequest;
#define TOK_THINK_DEFAULT (-1)
char *tokenizer_chat_apply(const Tokenizer *t, const ChatRequest *r, size_t *len, char *err, size_t err_size);
/* The same for plain messages (role, text): the CLI's conversations */
char *tokenizer_chat_render(const Tokenizer *t, const ChatMsg *m, int n, bool add_gen, int think,
                            const char *kwargs, size_t *len, char *err, size_t err_size);
/* s (n bytes) as a JSON string, quotes included, into a malloc'd buffer grown as *out, *out_len, *out_cap */
bool tokenizer_json_quote(char **out, size_t *out_len, size_t *out_cap, const char *s, size_t n);

/* ---- packed blob format (v3), shared with compiler/tokenizer_pack.c ----
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
 *      chat (when chat bytes > 0): u32 flags (TOKC_*), i32 end-of-turn id (-1: none), u32 template bytes,
 *      u32 bos_token bytes, u32 eos_token bytes (UINT32_MAX: none), then the template's Jinja source and the two
 *      token texts (as tokenizer_config names them) */
#define TOK_MAGIC 0x4B4F544Cu          /* "LTOK" */
#define TOK_VERSION 3u   /* 2: a chat section of template families, before the Jinja interpreter */
#define TOK_CHAT_HEADER_SIZE 20u
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
