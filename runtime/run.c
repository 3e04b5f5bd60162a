/* run.c: main() of an llmcc-built executable. Maps the payload appended to
 * the executable, binds the weights to the generated model code
 * (model_api.h), encodes the prompt (through the chat template when the
 * tokenizer has one), runs prefill in chunks of max_batch, then samples one
 * token at a time and streams the text. -i chats turn by turn, keeping the
 * KV cache: each turn feeds only its new tokens (or, where the template
 * rewrites earlier turns as Qwen3's drops their reasoning, the conversation
 * is rendered again and the cache kept up to where it still agrees).
 * Errors: one line "NAME: what is wrong" on stderr, exit status 1. */
#include "chat.h"
#include "model_api.h"
#include "payload_rt.h"
#include "sample.h"
#include "serve.h"
#include "session.h"
#include "tokenizer.h"
#include "json.h"
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MAX_NEW 256
#define MAX_STOP 16              /* --stop strings at most */
#define MAX_API_KEYS 256         /* --api-key / --api-key-file keys at most */

/* ---------------------------------------------------------------- state */
/* Everything lives in one global so an error exit leaves nothing unreachable. */
static struct {
    const char *name;
    Payload pl;
    Model *model;
    Tokenizer *tok;
    Session sess;          /* the conversation: its ids, what the KV cache holds, the sampler */
    Chat chat;             /* with a chat template: the conversation's messages (chat.c) */
    char *prompt_read;     /* the prompt read from stdin or -f FILE */
    char *prompt_args;     /* the prompt given as arguments, joined by spaces */
    int ctx;
    float *logits;         /* [vocab] */
    FILE *logits_f;
    int32_t *pending;      /* the ids of the prompt or turn at hand: reachable on an error exit */
    int think_open, think_close;   /* <think> / </think> ids, -1 when the tokenizer has none */
    char compute[256];     /* model_threads: what runs the kernels */
    bool no_graph;         /* --no-graph: the decode step's kernels launched one by one */
    double t_start;        /* now_s() as main began (--stats: start-up, the first token from the start) */
    double t_weights;      /* seconds to bind the weights: mapped (cpu) or copied to the GPU (model_init) */
    double t_ready;        /* seconds from the start until the model was ready */
    const char *api_keys[MAX_API_KEYS];   /* --serve's keys (ServeOpts.api_keys) */
    Grammar *grammar;      /* --grammar, --grammar-file, --json: each reply keeps to it (grammar.h) */
    GrammarVocab *gvocab;
    char *gvocab_bytes;
    char *keys_text;       /* --api-key-file's text, the keys in it */
} G;

/* a CUDA build (not cpu, not cuda-emu): the weights live in the GPU's memory */
static bool on_gpu(void) { return model_info.target && !strcmp(model_info.target, "cuda"); }

static _Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void die(const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "%s: ", G.name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static double now_s(void) { return session_now(); }

/* ---------------------------------------------------------------- output */
static void out_check(int failed) {
    if (!failed) return;
    if (errno == EPIPE) exit(0);   /* the reader went away (| head): stop quietly */
    int e = errno;
    fprintf(stderr, "%s: cannot write the output: %s\n", G.name, e ? strerror(e) : "write error");
    exit(1);
}
static void out_write(const void *p, size_t n) {
    if (!n) return;
    errno = 0;
    out_check(fwrite(p, 1, n, stdout) != n);
}
static void out_flush(void) {
    errno = 0;
    out_check(fflush(stdout) != 0);
}

/* ---------------------------------------------------------------- options */
typedef struct {
    const char *prompt, *prompt_ids, *logits_path, *system;
    const char *prompt_file;       /* -f FILE ("-": stdin) */
    const char *stop[MAX_STOP]; size_t stop_len[MAX_STOP]; int n_stop;   /* --stop: the reply ends before one */
    long max_new; bool has_n;
    SampleParams sp;
    unsigned sp_given;             /* bit i: the command line set model_info.sampling_from[i]'s setting */
    unsigned long long seed; bool has_seed;
    bool ids, stats, info, verify, ignore_eos, tokenize, version;
    bool device_topk;              /* --top-k from model_topk (default on the GPU; on the CPU the logits are at hand) */
    bool chat_on, chat_off, interactive;
    int think;                     /* enable_thinking: 0, 1, or TOK_THINK_DEFAULT (the template's) */
    const char *kwargs;            /* --chat-template-kwargs: more template variables (a JSON object), or NULL */
    const char *grammar, *grammar_file;   /* --grammar GBNF, --grammar-file FILE */
    bool json;                     /* --json: each reply a JSON object */
    bool hide_thinking;
    int ctx;
    int threads;                   /* --threads (0: one per physical core) */
    bool no_graph;                 /* --no-graph (model_use_graph) */
    const char *ppl_path;          /* --perplexity FILE */
    int ppl_ctx;                   /* --ppl-ctx: tokens per window (0: 512, at most --ctx) */
    bool serve;                    /* --serve: the HTTP server (serve.c) */
    ServeOpts so;
    bool serve_flag;               /* a server option was given (they need --serve) */
} Opts;

static void usage(void) {
    const ModelInfo *mi = &model_info;
    int kmax = (mi->max_top_k < MODEL_TOPK_CAP ? mi->max_top_k : MODEL_TOPK_CAP) - 1;
    char dev_topk[256] = "";
    if (kmax > 1)
        snprintf(dev_topk, sizeof dev_topk, "\n                          "
                 "(2..%d: drawn from the device's top-k, penalties applied there,\n"
                 "                          %s; --device-topk / --no-device-topk)", kmax,
                 on_gpu() ? "by default" : "with --device-topk (the CPU has the logits at hand)");
    printf("usage: %s [options] [PROMPT]\n"
           "Runs %s (%s, %s), weights and tokenizer built in. With no prompt: a chat on a terminal (when\n"
           "the model has a chat template), else the text on stdin is the prompt.\n\n"
           "The prompt:\n"
           "  -p, --prompt TEXT       text to continue (BOS added as the tokenizer says), or with a chat\n"
           "                          template the user's message (only the reply is printed); - : stdin\n"
           "  -f, --file FILE         the prompt is FILE's text (- : stdin; a line end at its end dropped)\n"
           "  --prompt-ids 1,2,3      token ids to continue, used as given (no chat template)\n"
           "  --chat, --no-chat       apply the chat template to the prompt (default: on when the\n"
           "                          tokenizer has one)\n"
           "  -sys, --system TEXT     the system message (default: the template's own, if any)\n"
           "                          (Llama 3.2's template dates the system turn with today's date;\n"
           "                          the environment's " TOK_CHAT_DATE_ENV "=\"26 Jul 2024\" sets it)\n"
           "  -i, -cnv, --interactive chat turn by turn (/help lists the commands; Ctrl-C stops a reply)\n"
           "  --think, --no-think     the template's thinking switch (enable_thinking; Qwen3: on by default)\n"
           "  --chat-template-kwargs JSON  more variables for the chat template, a JSON object, as\n"
           "                          apply_chat_template's keyword arguments ('{\"enable_thinking\": false}')\n"
           "  --hide-thinking         leave the reasoning (<think>...</think>) out of the printed reply\n"
           "                          (on a terminal it is printed dim)\n\n"
           "Generation:\n"
           "  -n, --max-tokens N      new tokens at most (default: until EOS or the context end, at most\n"
           "                          %d; in a chat no cap; -1: no cap; more than fits: up to the context end)\n"
           "  --temp, --temperature F >= 0; below 1e-4 (0): greedy (default %g)\n"
           "  --top-k N               >= 0; 0: off (default %d)%s\n"
           "  --top-p F               in (0, 1]; 1: off (default %g)\n"
           "  --min-p F               in [0, 1]; 0: off (default %g)\n"
           "  --repeat-penalty F      > 0; 1: off (default %g); over the prompt and the reply\n"
           "  --frequency-penalty F   in -2..2: each generated id's logit less F per time it was generated\n"
           "  --presence-penalty F    in -2..2: each generated id's logit less F (OpenAI's; 0: off)\n"
           "  -s, --seed N            sampling seed (default: from the clock)\n"
           "  -r, --stop TEXT         end the reply before TEXT (up to %d, each its own flag)\n"
           "  --ignore-eos            keep generating past end-of-sequence tokens\n"
           "  --grammar GBNF          each reply a sentence of this grammar (llama.cpp's GBNF; its rule root)\n"
           "  --grammar-file FILE     the same, from FILE\n"
           "  --json                  each reply a JSON object (RFC 8259, whitespace bounded)\n"
           "  -c, --ctx N             KV-cache length (default and most: %d)\n\n"
           "Output and measurement:\n"
           "  --ids                   print the generated ids, not text\n"
           "  --logits PATH           write the logits of each generated token (f32, %d per token)\n"
           "  --stats                 timings and which path sampled, on stderr (--serve: a line every 10 s;\n"
           "                          SIGUSR1 prints one at any time)\n"
           "  --tokenize              print the prompt's ids (after the chat template) and exit\n"
           "  --perplexity FILE       the text's perplexity, as llama.cpp's llama-perplexity measures it:\n"
           "                          windows of --ppl-ctx N tokens (default 512), the second half of each\n"
           "                          scored; prints \"perplexity: P\" and exits\n\n"
           "Serving (the OpenAI HTTP API: POST /v1/chat/completions, /v1/completions, GET /v1/models, /health):\n"
           "  --serve                 serve until SIGTERM; the sampling options above are the requests' defaults\n"
           "  --host ADDR             the address to listen on (default 127.0.0.1: this machine only)\n"
           "  --port N                the TCP port (default 8080; 0: any free one, printed)\n"
           "  --parallel N            requests in flight at once, each with a KV cache of its own\n"
           "                          (default 1, at most 64; those past their prompt decode as one batch,\n"
           "                          a prompt's chunk between two batches; more requests wait in a queue)\n"
           "  --api-key KEY           requests must carry \"Authorization: Bearer KEY\" (all but /health);\n"
           "                          again for more keys; LLMCC_API_KEY=KEY in the environment is one\n"
           "                          ps does not show\n"
           "  --api-key-file FILE     the keys, one a line: one per client, each its own prompt-cache rows\n"
           "  --prompt-cache on|off   keep the KV rows of a slot's last prompt for a request that starts\n"
           "                          alike, only ever the same key's (default: on with keys or on\n"
           "                          127.0.0.1, off beyond it without a key: it would tell one client\n"
           "                          of another's prompt)\n"
           "  --max-body BYTES        the largest request body (default 1048576)\n"
           "  --timeout S             seconds for a request to arrive, a reply to be taken up, and\n"
           "                          an idle connection to be kept (default 30)\n"
           "  --max-conns N           open connections at most (default 512); when full the oldest idle one\n"
           "                          makes room, else a 503 with Retry-After\n"
           "  --max-conns-per-peer N  of them from one address (default a quarter of --max-conns;\n"
           "                          127.0.0.1, a reverse proxy's, is not capped)\n"
           "  --stats-every S         the --stats line every S seconds (default 10)\n"
           "  --cors ORIGIN           let web pages of ORIGIN (or *) call the API: Access-Control-Allow-Origin\n"
           "                          on every reply, OPTIONS preflights answered\n"
           "  --no-access-log         no line on stderr per request (client, method, path, status, time, tokens)\n"
           "  The routes: POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize; GET /v1/models,\n"
           "  /metrics (Prometheus's text, under vLLM's names), /health\n\n"
           "The machine:\n"
           "  -t, --threads N         CPU threads (default: one per physical core, each pinned to it)\n"
           "  --no-graph              (GPU builds) launch the decode step's kernels one by one, not as one\n"
           "                          CUDA Graph (to compare; LLMCC_CUDA_CHECK=1 does so too)\n"
           "  --info                  describe the model and the settings in force, and exit\n"
           "  --verify                check the built-in payload's checksum and exit\n"
           "  --version               llmcc's version, the model, the build's date and target\n"
           "  -h, --help              this text\n",
           mi->name, mi->name, mi->architecture, mi->target, DEFAULT_MAX_NEW,
           mi->temperature, mi->top_k, dev_topk, mi->top_p, mi->min_p, mi->repetition_penalty, MAX_STOP,
           mi->max_ctx, mi->vocab_size);
}

/* A whole number in lo..hi; what: the range in words (NULL: "a whole number in lo..hi"). */
static long parse_int(const char *flag, const char *s, long lo, long hi, const char *what) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        if (what) die("%s: '%s' is not %s", flag, s, what);
        die("%s: '%s' is not a whole number in %ld..%ld", flag, s, lo, hi);
    }
    return v;
}
/* A finite number with lo < v (lo_open) or lo <= v, and v <= hi; what: the range in words. */
static float parse_float(const char *flag, const char *s, double lo, bool lo_open, double hi, const char *what) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || (lo_open && v == lo) || v > hi)
        die("%s: '%s' is not %s", flag, s, what);
    return (float)v;
}

/* The whole text of path ("-": stdin), malloc'd and NUL-terminated; flag names it in an error. strip_eol: a
 * prompt's, without the line end it ends with. */
static char *read_text(const char *path, const char *flag, bool strip_eol) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) die("%s %s: %s", flag, path, strerror(errno));
    size_t cap = 1 << 16, len = 0, k;
    char *text = malloc(cap + 1);
    while (text && (k = fread(text + len, 1, cap - len, f)) > 0)
        if ((len += k) == cap) {
            char *t = realloc(text, (cap *= 2) + 1);
            if (!t) free(text);
            text = t;
        }
    bool bad = !text || ferror(f);
    if (f != stdin) fclose(f);
    if (!text) die("out of memory");
    if (bad) { free(text); die("%s %s: cannot read it", flag, path); }
    text[len] = 0;
    if (strlen(text) != len) { free(text); die("%s %s: the text holds a NUL byte", flag, path); }
    /* one line end at the end is the file's or echo's, not the prompt's */
    if (strip_eol && len && text[len - 1] == '\n') text[--len] = 0;
    if (strip_eol && len && text[len - 1] == '\r') text[--len] = 0;
    return text;
}

/* one more key the server takes (--api-key, --api-key-file, LLMCC_API_KEY) */
static void add_api_key(const char *flag, const char *key, Opts *o) {
    if (!*key) die("%s: empty", flag);
    if (o->so.n_api_keys == MAX_API_KEYS) die("%s: more than %d keys", flag, MAX_API_KEYS);
    G.api_keys[o->so.n_api_keys++] = key;
}

/* a flag's value that must be a JSON object (--chat-template-kwargs) */
static const char *json_object_arg(const char *flag, const char *s) {
    Json j;
    size_t at;
    JsonError e = json_read(&j, s, strlen(s), &at);
    bool ok = e == JSON_OK && json_bad_token(&j) < 0 && json_type(&j, 0) == JSON_OBJECT;
    json_free(&j);
    if (!ok) die("%s: '%s' is not a JSON object", flag, s);
    return s;
}

static void parse_args(int argc, char **argv, Opts *o) {
    const ModelInfo *mi = &model_info;
    memset(o, 0, sizeof *o);
    o->sp.temperature = mi->temperature;
    o->sp.top_p = mi->top_p;
    o->sp.min_p = mi->min_p;
    o->sp.rep = mi->repetition_penalty;
    o->sp.top_k = mi->top_k;
    o->ctx = mi->max_ctx;
    o->device_topk = on_gpu();
    o->think = TOK_THINK_DEFAULT;
    o->so = (ServeOpts){ .host = "127.0.0.1", .port = 8080, .parallel = 1, .max_body = 1 << 20, .timeout_s = 30,
                         .max_conns = 512, .stats_every = 10, .api_keys = G.api_keys, .prompt_cache = -1,
                         .access_log = true };
    size_t args_len = 0;
    bool only_args = false;   /* after -- */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        char flag[64];
        if (!only_args && !strcmp(a, "--")) { only_args = true; continue; }
        if (only_args || a[0] != '-' || a[1] == 0) {   /* a word of the prompt, as ollama run takes one */
            size_t l = strlen(a);
            char *p = realloc(G.prompt_args, args_len + l + 2);
            if (!p) die("out of memory");
            G.prompt_args = p;
            if (args_len) p[args_len++] = ' ';
            memcpy(p + args_len, a, l + 1);
            args_len += l;
            continue;
        }
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t fl = eq ? (size_t)(eq - a) : strlen(a);
        if (fl >= sizeof flag) fl = sizeof flag - 1;
        memcpy(flag, a, fl);
        flag[fl] = 0;
        if (eq) val = eq + 1;
#define IS(s) (strcmp(flag, s) == 0)
#define NOVAL() do { if (val) die("%s takes no value", flag); } while (0)
#define VAL() (val ? val : (i + 1 < argc ? argv[++i] : (die("%s needs a value", flag), "")))
        if (IS("-h") || IS("--help")) { NOVAL(); usage(); out_flush(); exit(0); }
        else if (IS("--prompt") || IS("-p")) o->prompt = VAL();
        else if (IS("--file") || IS("-f")) o->prompt_file = VAL();
        else if (IS("--stop") || IS("-r")) {
            const char *t = VAL();
            if (!*t) die("%s: empty", flag);
            if (o->n_stop == MAX_STOP) die("%s: at most %d stop strings", flag, MAX_STOP);
            o->stop_len[o->n_stop] = strlen(t);
            o->stop[o->n_stop++] = t;
        }
        else if (IS("--version")) { NOVAL(); o->version = true; }
        else if (IS("--prompt-ids")) o->prompt_ids = VAL();
        else if (IS("-n") || IS("--max-tokens")) {
            o->max_new = parse_int(flag, VAL(), -1, 1L << 30, NULL); o->has_n = true;
        }
        else if (IS("--temperature") || IS("--temp")) {
            o->sp.temperature = parse_float(flag, VAL(), 0, false, 1e6, "a number in 0..1e6 (0: greedy)");
            o->sp_given |= 1;
        }
        else if (IS("--top-k")) {
            o->sp.top_k = (int)parse_int(flag, VAL(), 0, 1L << 30, "a whole number >= 0 (0: off)");
            o->sp_given |= 2;
        }
        else if (IS("--top-p")) {
            o->sp.top_p = parse_float(flag, VAL(), 0, true, 1, "a number in (0, 1] (1: off)");
            o->sp_given |= 4;
        }
        else if (IS("--min-p")) {
            o->sp.min_p = parse_float(flag, VAL(), 0, false, 1, "a number in [0, 1] (0: off)");
            o->sp_given |= 8;
        }
        else if (IS("--repeat-penalty")) {
            o->sp.rep = parse_float(flag, VAL(), 0, true, 1e6, "a number > 0 (1: off)");
            o->sp_given |= 16;
        }
        else if (IS("--frequency-penalty"))
            o->sp.freq = parse_float(flag, VAL(), -2, false, 2, "a number in -2..2 (0: off)");
        else if (IS("--presence-penalty"))
            o->sp.pres = parse_float(flag, VAL(), -2, false, 2, "a number in -2..2 (0: off)");
        else if (IS("--chat")) { NOVAL(); o->chat_on = true; }
        else if (IS("--no-chat")) { NOVAL(); o->chat_off = true; }
        else if (IS("--system") || IS("-sys") || IS("--system-prompt")) o->system = VAL();
        else if (IS("-i") || IS("--interactive") || IS("-cnv") || IS("--conversation")) {
            NOVAL();
            o->interactive = true;
        }
        else if (IS("--think") || IS("--no-think")) {
            NOVAL();
            if (o->think != TOK_THINK_DEFAULT) die("give --think or --no-think once");
            o->think = IS("--think");
        }
        else if (IS("--hide-thinking")) { NOVAL(); o->hide_thinking = true; }
        else if (IS("--chat-template-kwargs")) o->kwargs = json_object_arg(flag, VAL());
        else if (IS("--seed") || IS("-s")) {
            const char *s = VAL();
            char *end;
            errno = 0;
            o->seed = strtoull(s, &end, 10);
            if (!*s || *end || errno || s[0] == '-') die("%s: '%s' is not a whole number >= 0", flag, s);
            o->has_seed = true;
        }
        else if (IS("--ids")) { NOVAL(); o->ids = true; }
        else if (IS("--logits")) o->logits_path = VAL();
        else if (IS("--stats")) { NOVAL(); o->stats = true; }
        else if (IS("--ignore-eos")) { NOVAL(); o->ignore_eos = true; }
        else if (IS("--grammar")) o->grammar = VAL();
        else if (IS("--grammar-file")) o->grammar_file = VAL();
        else if (IS("--json")) { NOVAL(); o->json = true; }
        else if (IS("--device-topk")) { NOVAL(); o->device_topk = true; }
        else if (IS("--no-device-topk")) { NOVAL(); o->device_topk = false; }
        else if (IS("--tokenize")) { NOVAL(); o->tokenize = true; }
        else if (IS("--info")) { NOVAL(); o->info = true; }
        else if (IS("--ctx") || IS("-c") || IS("--ctx-size"))
            o->ctx = (int)parse_int(flag, VAL(), 1, mi->max_ctx, NULL);
        else if (IS("--threads") || IS("-t")) o->threads = (int)parse_int(flag, VAL(), 1, 1024, NULL);
        else if (IS("--no-graph")) { NOVAL(); o->no_graph = true; }
        else if (IS("--perplexity")) o->ppl_path = VAL();
        else if (IS("--ppl-ctx")) o->ppl_ctx = (int)parse_int(flag, VAL(), 4, mi->max_ctx, NULL);
        else if (IS("--verify")) { NOVAL(); o->verify = true; }
        else if (IS("--serve")) { NOVAL(); o->serve = true; }
        else if (IS("--host")) { o->so.host = VAL(); o->serve_flag = true; }
        else if (IS("--port")) { o->so.port = (int)parse_int(flag, VAL(), 0, 65535, NULL); o->serve_flag = true; }
        else if (IS("--parallel")) { o->so.parallel = (int)parse_int(flag, VAL(), 1, 64, NULL); o->serve_flag = true; }
        else if (IS("--api-key")) { add_api_key(flag, VAL(), o); o->serve_flag = true; }
        else if (IS("--api-key-file")) {   /* one key a line; blank lines and # comments skipped */
            char *text = G.keys_text = read_text(VAL(), flag, false);
            for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
                size_t n = strlen(line);
                while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t')) line[--n] = 0;
                while (*line == ' ' || *line == '\t') line++;
                if (*line && *line != '#') add_api_key(flag, line, o);
            }
            if (!o->so.n_api_keys) die("%s: no key in it (one a line)", flag);
            o->serve_flag = true;
        }
        else if (IS("--prompt-cache")) {
            const char *v = VAL();
            if (strcmp(v, "on") && strcmp(v, "off")) die("%s: '%s' is not on or off", flag, v);
            o->so.prompt_cache = !strcmp(v, "on");
            o->serve_flag = true;
        }
        else if (IS("--max-body")) { o->so.max_body = parse_int(flag, VAL(), 1, 1L << 30, NULL); o->serve_flag = true; }
        else if (IS("--timeout")) {
            o->so.timeout_s = (int)parse_int(flag, VAL(), 1, 86400, NULL);
            o->serve_flag = true;
        } else if (IS("--stats-every")) {
            o->so.stats_every = (int)parse_int(flag, VAL(), 1, 86400, NULL);
            o->stats = o->serve_flag = true;
        } else if (IS("--max-conns")) {
            o->so.max_conns = (int)parse_int(flag, VAL(), 1, 65536, NULL);
            o->serve_flag = true;
        } else if (IS("--max-conns-per-peer")) {
            o->so.max_per_peer = (int)parse_int(flag, VAL(), 1, 65536, NULL);
            o->serve_flag = true;
        } else if (IS("--cors")) {
            o->so.cors = VAL();
            for (const char *q = o->so.cors; *q; q++)   /* it goes into every reply's head as it is */
                if ((unsigned char)*q <= 0x20 || *q == 0x7f)
                    die("%s: an origin like https://example.com or * has no spaces or control characters", flag);
            if (!*o->so.cors) die("%s: empty (an origin like https://example.com, or *)", flag);
            o->serve_flag = true;
        } else if (IS("--no-access-log")) {
            NOVAL();
            o->so.access_log = false;
            o->serve_flag = true;
        }
        else die("unknown option '%s' (see --help)", a);
#undef IS
#undef NOVAL
#undef VAL
    }
    if (G.prompt_args) {
        if (o->prompt) die("give the prompt once: as --prompt TEXT or as the arguments, not both");
        o->prompt = G.prompt_args;
    }
    if (o->prompt && o->prompt_file) die("give --prompt TEXT or -f FILE, not both");
    if ((o->prompt || o->prompt_file) && o->prompt_ids) die("give --prompt (or -f) or --prompt-ids, not both");
    if (o->prompt_file || (o->prompt && !strcmp(o->prompt, "-"))) {
        const char *path = o->prompt_file ? o->prompt_file : "-";
        o->prompt = G.prompt_read = read_text(path, o->prompt_file ? "-f" : "--prompt", true);
    }
    if (o->serve && o->n_stop) die("--serve: each request says its stop strings: no --stop");
    if (o->serve && (o->grammar || o->grammar_file || o->json))
        die("--serve: each request says its response_format or grammar: no --grammar, --grammar-file or --json");
    if (!!o->grammar + !!o->grammar_file + o->json > 1) die("give one of --grammar, --grammar-file and --json");
    if (o->serve_flag && !o->serve)
        die("--host, --port, --parallel, --api-key, --api-key-file, --prompt-cache, --max-body, --timeout, "
            "--max-conns, --max-conns-per-peer, --stats-every, --cors and --no-access-log go with --serve");
    if (o->serve && (o->prompt || o->prompt_ids || o->interactive || o->tokenize || o->ppl_path || o->ids ||
                     o->logits_path))
        die("--serve takes its prompts from HTTP requests: no --prompt, --prompt-ids, -i, --tokenize, "
            "--perplexity, --ids or --logits");
    if (o->serve && (o->has_n || o->ignore_eos || o->think != TOK_THINK_DEFAULT || o->chat_on || o->chat_off ||
                     o->hide_thinking || o->device_topk != on_gpu()))
        die("--serve: each request says its max_tokens, ignore_eos, chat_template_kwargs.enable_thinking and "
            "route (chat or completions): no -n, --ignore-eos, --think, --no-think, --chat, --no-chat, "
            "--hide-thinking or --device-topk");
    const char *env_key = getenv("LLMCC_API_KEY");   /* a key ps and /proc do not show */
    if (o->serve && !o->so.n_api_keys && env_key && *env_key) add_api_key("LLMCC_API_KEY", env_key, o);
    if (o->ppl_path && (o->prompt || o->prompt_ids || o->interactive || o->tokenize))
        die("--perplexity scores a file's text: it takes no prompt, -i or --tokenize");
    if (o->ppl_ctx && !o->ppl_path) die("--ppl-ctx goes with --perplexity FILE");
    if (o->chat_on && o->chat_off) die("give --chat or --no-chat, not both");
    if (o->interactive && o->prompt_ids) die("-i reads the user's turns from stdin: give no --prompt-ids");
    if (o->interactive && o->tokenize) die("--tokenize prints one prompt's ids: it does not go with -i");
    if (o->chat_on && o->prompt_ids) die("--prompt-ids are used as given: --chat does not apply to them");
    if (o->think != TOK_THINK_DEFAULT && o->prompt_ids)
        die("--prompt-ids are used as given: --%s does not apply to them", o->think ? "think" : "no-think");
}

/* ---------------------------------------------------------------- pieces */
static void check_tensors(void) {
    const ModelInfo *mi = &model_info;
    const PayloadHeader *h = G.pl.hdr;
    if ((int)h->n_tensors != mi->n_tensors)
        die("the executable is truncated or damaged (payload holds %u tensors, the model expects %d)",
            h->n_tensors, mi->n_tensors);
    for (int i = 0; i < mi->n_tensors; i++)
        if (strcmp(G.pl.tensors[i].name, mi->tensor_names[i]) != 0)
            die("the executable is truncated or damaged (payload tensor %d is '%s', the model expects '%s')",
                i, G.pl.tensors[i].name, mi->tensor_names[i]);
}

static double mib(size_t b) { return b / 1048576.0; }

/* "launches per token: ...": one graph launch where the decode step runs as a CUDA Graph (model_use_graph; without
 * a model, as when model_init failed, the forward call's kernels) */
static void launches_line(FILE *f) {
    const int graph = G.model && model_use_graph(G.model, !G.no_graph), n = model_info.decode_launches;
    if (graph && model_graph_kernels(G.model))   /* after a decode step */
        fprintf(f, "launches per token: 1 (a CUDA Graph; its capture holds %d kernels; --no-graph: %d launches)\n",
                model_graph_kernels(G.model), n);
    else if (graph)
        fprintf(f, "launches per token: 1 (a CUDA Graph of the step's %d kernels; --no-graph: %d launches)\n", n, n);
    else fprintf(f, "launches per token: %d (a one-token forward call's kernels)\n", n);
}

/* "sampling: temperature 0.8 (llama.cpp's default), top-k 40 (--top-k), ...": the settings in force, each with
 * where it came from */
static void print_sampling(const Opts *o) {
    static const char *const names[MODEL_SAMPLING_SETTINGS] = {"temperature", "top-k", "top-p", "min-p",
                                                               "repetition penalty"};
    static const char *const flags[MODEL_SAMPLING_SETTINGS] = {"--temperature", "--top-k", "--top-p", "--min-p",
                                                               "--repeat-penalty"};
    const double v[MODEL_SAMPLING_SETTINGS] = {o->sp.temperature, o->sp.top_k, o->sp.top_p, o->sp.min_p, o->sp.rep};
    printf("sampling:");
    for (int i = 0; i < MODEL_SAMPLING_SETTINGS; i++) {
        const char *from = o->sp_given >> i & 1 ? flags[i] : model_info.sampling_from[i];
        printf("%s %s %g (%s)", i ? "," : "", names[i], v[i], from && *from ? from : "built in");
    }
    printf("\n");
}

static void print_version(const Opts *o) {
#ifndef LLMCC_MADE_BY
#define LLMCC_MADE_BY "llmcc"
#endif
    printf("%s: %s for %s, built %s %s by %s\n", G.name, model_info.architecture, model_info.target, __DATE__,
           __TIME__, LLMCC_MADE_BY);
    print_sampling(o);
}

static void print_info(const Opts *o, int ctx) {
    const ModelInfo *mi = &model_info;
    const PayloadHeader *h = G.pl.hdr;
    printf("name: %s\narchitecture: %s\ntarget: %s\ncompute: %s\n", mi->name, mi->architecture, mi->target,
           G.compute);
    printf("vocab size: %d\nhidden size: %d\nintermediate size: %d\nlayers: %d\n",
           mi->vocab_size, mi->hidden_size, mi->intermediate_size, mi->n_layers);
    printf("heads: %d\nkv heads: %d\nhead dim: %d\n", mi->n_heads, mi->n_kv_heads, mi->head_dim);
    printf("context: %d (compiled: %d)\nmax batch: %d\n", ctx, mi->max_ctx, mi->max_batch);
    printf("kv cache: %s\n", mi->kv_dtype);
    printf("bos id: %d\neos ids:", mi->bos_id);
    for (int i = 0; i < mi->n_eos; i++) printf(" %d", mi->eos_ids[i]);
    printf("\nsampling defaults: temperature %g, top-k %d, top-p %g, min-p %g, repetition penalty %g\n",
           mi->temperature, mi->top_k, mi->top_p, mi->min_p, mi->repetition_penalty);
    print_sampling(o);
    enum { NDT = 32 };   /* room for every PDT_* code (payload.h); payload_open refuses others */
    uint64_t cnt[NDT] = {0}, bytes[NDT] = {0}, total = 0;
    for (uint32_t i = 0; i < h->n_tensors; i++) {
        uint32_t d = G.pl.tensors[i].dtype;
        if (d < NDT) { cnt[d]++; bytes[d] += G.pl.tensors[i].nbytes; }
        total += G.pl.tensors[i].nbytes;
    }
    printf("weights: %u tensors, %.1f MiB:", h->n_tensors, mib(total));
    for (uint32_t d = 0; d < NDT; d++)
        if (cnt[d])
            printf(" %s (%llu tensors, %.1f MiB)", payload_dtype_name(d), (unsigned long long)cnt[d], mib(bytes[d]));
    printf("\ntokenizer: %s (%llu bytes)\n", G.tok ? "built in" : "none", (unsigned long long)G.pl.tok_size);
    if (G.tok && tokenizer_has_chat(G.tok)) {
        printf("chat template: the checkpoint's (%zu bytes of Jinja), end of turn %d\n",
               tokenizer_chat_template_size(G.tok), tokenizer_chat_eot(G.tok));
        printf("stop ids:");
        for (int i = 0; i < mi->n_eos; i++) printf(" %d", mi->eos_ids[i]);
        bool dup = false;
        for (int i = 0; i < mi->n_eos; i++) dup |= mi->eos_ids[i] == tokenizer_chat_eot(G.tok);
        if (!dup && tokenizer_chat_eot(G.tok) >= 0) printf(" %d", tokenizer_chat_eot(G.tok));
        printf("\n");
        if (tokenizer_chat_has_thinking(G.tok))
            printf("thinking: the template's switch (enable_thinking; --think, --no-think)\n");
    } else printf("chat template: none\n");
    printf("payload: %llu bytes (%.1f MiB)%s\n", (unsigned long long)G.pl.size, mib(G.pl.size),
           G.pl.has_footer ? "" : ", from LLMCC_PAYLOAD");
    const char *err = model_init(&G.model, G.pl.tensors, G.pl.base, ctx);
    if (err) G.model = NULL;
    launches_line(stdout);
    if (err) printf("memory: unknown (%s)\n", err);
    else {
        size_t wb = 0, kv = 0, act = 0;
        size_t tot = model_memory_bytes(G.model, &wb, &kv, &act);
        printf("memory: %.1f MiB (weights %.1f MiB, kv cache %.1f MiB, activations %.1f MiB)\n",
               mib(tot), mib(wb), mib(kv), mib(act));
    }
}

/* The ids of --prompt-ids, into G.pending. */
static int parse_ids(const char *s, int vocab) {
    int n = 0, cap = 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n'))
            die("--prompt-ids: '%s' is not a list of ids like 1,2,3", s);
        if (x < 0 || x >= vocab) die("--prompt-ids: id %ld is outside the vocabulary (0..%d)", x, vocab - 1);
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int32_t *nv = realloc(G.pending, (size_t)cap * sizeof *nv);
            if (!nv) die("out of memory");
            G.pending = nv;
        }
        G.pending[n++] = (int32_t)x;
        p = end;
    }
    if (n == 0) die("--prompt-ids: no ids given");
    return n;
}

/* Frees everything, once, right before a successful exit (an error exit leaves it all reachable from G). */
static void cleanup(void) {
    if (G.model) model_free(G.model);
    if (G.tok) tokenizer_free(G.tok);
    if (G.logits_f) fclose(G.logits_f);
    session_free(&G.sess);
    free(G.logits);
    free(G.pending);
    chat_free(&G.chat);
    free(G.prompt_read);
    free(G.prompt_args);
    free(G.keys_text);
    grammar_free(G.grammar);
    grammar_vocab_free(G.gvocab);
    free(G.gvocab_bytes);
    payload_close(&G.pl);
}
/* The end of a run that only reports (--verify, --info, --tokenize). */
static _Noreturn void finish(void) {
    out_flush();
    cleanup();
    exit(0);
}

/* what (the prompt, the conversation; with: what it counts in) is n tokens, more than the context holds */
static _Noreturn void too_long(const char *what, int n, const char *with) {
    die("%s is %d tokens%s, longer than the context (%d tokens%s)", what, n, with, G.ctx,
        G.ctx < model_info.max_ctx ? "; see --ctx" : "");
}

/* ---------------------------------------------------------------- generation */
/* Ctrl-C in a chat: the reply stops (turn), or at the prompt a first one says how to leave and a second leaves */
static void on_sigint(int sig) { (void)sig; chat_interrupted = 1; }
/* restart: a write to the terminal goes on after Ctrl-C (a reply); else a read at the prompt is cut short */
static void catch_sigint(bool restart) {
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGINT, &sa, NULL);
}
typedef struct {
    double t_prefill, t_first, t_decode;
    double t_first_start;  /* the first token, in seconds from the program's start */
    long n_prompt, n_gen, n_decode, n_argmax, n_topk;
    long n_think;          /* generated tokens of reasoning, <think> and </think> included */
    int turns;
} Stats;

#define DIM "\033[2m"
#define UNDIM "\033[0m"

/* how a turn's text is being shown: reasoning (<think> ... </think>) dim on a terminal, left out with
 * --hide-thinking */
typedef struct {
    const Opts *o;
    Stats *st;
    bool tty, in_think, skip_nl;
} Shown;

/* session.h's on_text: the reply, or the echoed prompt (tok -1), to stdout; with --ids the ids; with --logits each
 * generated token's logits to the file */
static void show(void *ctx, int tok, const char *text, size_t n) {
    Shown *v = ctx;
    const Opts *o = v->o;
    const size_t V = (size_t)model_info.vocab_size;
    if (tok >= 0 && G.logits_f && fwrite(G.logits, sizeof(float), V, G.logits_f) != V)
        die("--logits %s: %s", o->logits_path, strerror(errno));
    bool opens = tok >= 0 && tok == G.think_open, closes = tok >= 0 && tok == G.think_close;
    v->in_think |= opens;
    v->st->n_think += tok >= 0 && v->in_think;
    if (o->ids) {
        char b[16];
        if (tok >= 0) out_write(b, (size_t)snprintf(b, sizeof b, G.sess.n_gen > 1 ? " %d" : "%d", tok));
    } else if (v->in_think && o->hide_thinking) {
        v->skip_nl = closes;      /* the answer's leading newlines belong to the reasoning's end */
    } else {
        if (opens && v->tty) out_write(DIM, strlen(DIM));
        size_t at = 0;
        while (v->skip_nl && at < n && text[at] == '\n') at++;
        v->skip_nl &= at == n;
        out_write(text + at, n - at);
        if (closes && v->tty) out_write(UNDIM, strlen(UNDIM));
    }
    v->in_think &= !closes;
    out_flush();
}

/* Appends ids (one turn's prompt) to the conversation, feeds what the KV cache lacks, then samples until a stop id
 * or the token limit, streaming the text (or ids). The last sampled token stays in the conversation unfed; the
 * next turn feeds it first. */
static void turn(const Opts *o, const int32_t *ids, int n, bool echo, long max_new, Stats *st) {
    Session *s = &G.sess;
    if (s->n_ids + n > G.ctx) {
        if (st->turns == 0) too_long("the prompt", n, "");
        too_long("the conversation", s->n_ids + n, " with this turn");
    }
    Shown v = { o, st, !o->ids && isatty(1), false, false };
    GrammarState gs = G.grammar ? grammar_start(G.grammar) : (GrammarState){0};   /* each reply from the start */
    SessionParams p = { .sp = o->sp, .max_new = max_new, .ignore_eos = o->ignore_eos,
                        .grammar = G.grammar ? &gs : NULL, .grammar_vocab = G.gvocab,
                        .want_logits = G.logits_f != NULL, .device_topk = o->device_topk, .continues = echo,
                        .echo = echo, .stop = o->stop, .stop_len = o->stop_len, .n_stop = o->n_stop, .on_text = show,
                        .ctx = &v };
    session_begin(s, ids, n, &p);

    double t0 = now_s();
    st->n_prompt += s->n_ids - s->n_fed;
    while (session_prefilling(s) && !chat_interrupted) session_forward(s);
    st->t_prefill += now_s() - t0;
    SessionStep step = SESSION_STOP;
    while (!chat_interrupted && (step = session_took(s, G.logits)) == SESSION_MORE) {
        double t1 = now_s();
        session_forward(s);
        st->t_decode += now_s() - t1;
        st->n_decode++;
    }
    if (step == SESSION_OOM) die("out of memory");
    if (st->turns == 0 && s->t_first > 0) {
        st->t_first = s->t_first - t0;
        st->t_first_start = s->t_first - G.t_start;
    }
    st->n_gen += s->n_gen;
    st->n_argmax += s->how == SAMPLE_ARGMAX ? s->n_gen : 0;
    st->n_topk += s->how == SAMPLE_DEVICE_TOPK ? s->n_gen : 0;
    st->turns++;
    if (v.in_think && v.tty && !o->hide_thinking) out_write(UNDIM, strlen(UNDIM));
    out_write("\n", 1);
    out_flush();
}

static void check_ids(const int32_t *ids, int n) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= model_info.vocab_size)
            die("the tokenizer gave id %d, outside the model's vocabulary (0..%d)", ids[i], model_info.vocab_size - 1);
}

/* ---------------------------------------------------------------- main */
/* --perplexity FILE: the text's perplexity as llama.cpp's llama-perplexity measures it, so that the two compare:
 * the text's tokens (the tokenizer's BOS first, if it adds one) cut into whole windows of n_ctx tokens, each run
 * from an empty cache (positions from 0) with its first token replaced by BOS where the tokenizer adds one, and
 * the second half of each window scored: exp(mean over those positions of -log p(next token | the window's
 * tokens so far)). Each token is fed alone (a decode step), so every position's logits come back. */
static void perplexity(const Opts *o) {
    char *text = read_text(o->ppl_path, "--perplexity", false);
    int32_t *ids = NULL;
    int n = tokenizer_encode(G.tok, text, strlen(text), true, &ids);
    free(text);
    if (n < 0) die("out of memory");
    G.pending = ids;   /* freed on an error exit */
    const int bos = tokenizer_bos_id(G.tok), V = model_info.vocab_size;
    const bool add_bos = n > 0 && bos >= 0 && ids[0] == bos;
    const int n_ctx = o->ppl_ctx ? o->ppl_ctx : G.ctx < 512 ? G.ctx : 512, first = n_ctx / 2;
    if (n_ctx > G.ctx) die("--ppl-ctx %d: more than the context (--ctx %d)", n_ctx, G.ctx);
    const int windows = n / n_ctx;
    if (windows == 0) die("--perplexity %s: %d tokens, fewer than one window of %d", o->ppl_path, n, n_ctx);
    check_ids(ids, windows * n_ctx);
    double nll = 0, t0 = now_s();
    long scored = 0;
    for (int w = 0; w < windows; w++) {
        const int32_t *win = ids + (size_t)w * n_ctx;
        for (int j = 0; j + 1 < n_ctx; j++) {
            int32_t tok = j == 0 && add_bos ? bos : win[j];
            model_forward(G.model, &tok, 1, j, G.logits);
            if (j < first) continue;
            double mx = G.logits[0], sum = 0;
            for (int v = 1; v < V; v++) if (G.logits[v] > mx) mx = G.logits[v];
            for (int v = 0; v < V; v++) sum += exp((double)G.logits[v] - mx);
            nll += mx + log(sum) - G.logits[win[j + 1]];
            scored++;
        }
    }
    printf("perplexity: %.6f (%ld tokens scored in %d windows of %d; %d tokens in the file)\n", exp(nll / scored),
           scored, windows, n_ctx, n);
    if (o->stats) fprintf(stderr, "perplexity: %.2f tok/s\n", windows * (n_ctx - 1) / (now_s() - t0));
    free(ids);
    G.pending = NULL;
}

/* -i: the user's messages and commands (chat.c) until /bye, the input's end or a second Ctrl-C at the prompt, each
 * message answered in the conversation's KV cache. When the conversation outgrows the context, its oldest turns
 * are left out to keep a quarter of it (or -n tokens) for the reply; said once. */
static void converse(const Opts *o, Stats *st) {
    const bool tty = isatty(0);
    const long cap = o->has_n && o->max_new >= 0 ? o->max_new : -1;
    const int reserve = cap >= 0 && cap < G.ctx / 4 ? (int)cap : G.ctx / 4;
    bool interrupted = false, told = false;
    if (tty) fprintf(stderr, "%s: a chat (/help lists the commands; /bye or Ctrl-D leaves)\n", G.name);
    chat_interrupted = 0;
    for (;;) {
        catch_sigint(false);
        char *text;
        size_t len;
        ChatInput in = chat_read(tty ? "> " : "", &text, &len);
        if (in == CHAT_INTERRUPT) {
            chat_interrupted = 0;   /* taken: before the message, so that a second Ctrl-C after it counts */
            if (interrupted) break;
            interrupted = true;
            fprintf(stderr, "\n(Ctrl-C again, Ctrl-D or /bye leaves)\n");
            continue;
        }
        interrupted = false;
        if (in == CHAT_END && !text && errno && ferror(stdin)) die("reading stdin: %s", strerror(errno));
        if (in == CHAT_END || in == CHAT_BYE) { free(text); break; }
        const char *err = NULL;
        if (in == CHAT_HELP) fputs(chat_help, stderr);
        else if (in == CHAT_CLEAR) { chat_clear(&G.chat); fprintf(stderr, "(the conversation is cleared)\n"); }
        else if (in == CHAT_SYSTEM && !len) fprintf(stderr, "/system: give the system message's text\n");
        else if (in == CHAT_SYSTEM) err = chat_set_system(&G.chat, text, len);
        else if (in == CHAT_UNKNOWN) fprintf(stderr, "unknown command %s (/help lists them)\n", text);
        if (in != CHAT_MESSAGE || !len) {
            free(text);
            if (err) die("%s", err);
            continue;
        }
        int n = chat_message_ids(&G.chat, text, len, reserve, &G.pending);
        free(text);
        if (n == -1) die("out of memory");
        if (n == -3) {   /* the template raised: the message is left out, the chat goes on */
            fprintf(stderr, "%s: the chat template refused this message: %s\n", G.name, G.chat.error);
            continue;
        }
        if (n == -2) {
            fprintf(stderr, "%s: this message is %d tokens, longer than the context (%d tokens%s): left out\n",
                    G.name, G.chat.too_long, G.ctx, G.ctx < model_info.max_ctx ? "; see --ctx" : "");
            continue;
        }
        if (G.chat.dropped && !told) {
            fprintf(stderr, "%s: the conversation outgrew the context (%d tokens%s): its oldest turns are left out "
                    "from here on\n", G.name, G.ctx, G.ctx < model_info.max_ctx ? "; see --ctx" : "");
            told = true;
        }
        check_ids(G.pending, n);
        catch_sigint(true);
        turn(o, G.pending, n, false, cap, st);
        chat_interrupted = 0;   /* a Ctrl-C during the reply stopped it */
        free(G.pending);
        G.pending = NULL;
        if (chat_add_reply(&G.chat)) die("out of memory");
    }
    if (tty) fputc('\n', stderr);
}

int main(int argc, char **argv) {
    const ModelInfo *mi = &model_info;
    G.t_start = now_s();
    G.name = mi->name && *mi->name ? mi->name : "llmcc";
    signal(SIGPIPE, SIG_IGN);
    Opts o;
    parse_args(argc, argv, &o);
    G.no_graph = o.no_graph;
    model_threads(o.threads, G.compute, sizeof G.compute);
    const int V = mi->vocab_size;
    if (V <= 0) die("the model has no vocabulary");
    if (o.version) {
        print_version(&o);
        out_flush();
        return 0;
    }

    double t_open = now_s();
    const char *err = payload_open(&G.pl, argv[0]);
    t_open = now_s() - t_open;   /* a compressed payload is decoded here */
    if (err) die("%s", err);
    if (o.verify) {
        uint64_t sum = 0;
        err = payload_verify(&G.pl, &sum);
        if (err) die("%s", err);
        printf("%s: payload ok (%llu bytes, checksum %016llx%s)\n", G.name, (unsigned long long)G.pl.size,
               (unsigned long long)sum, G.pl.has_footer ? "" : ", no footer to compare with");
        finish();
    }
    check_tensors();
    if (G.pl.tok_size) {
        err = tokenizer_load(&G.tok, G.pl.tok_blob, (size_t)G.pl.tok_size);
        if (err) { G.tok = NULL; die("the built-in tokenizer: %s", err); }
    }
    if (o.info) {
        print_info(&o, o.ctx);
        finish();
    }
    if (!G.tok && o.ppl_path) die("--perplexity: this executable has no tokenizer");
    if (!G.tok && o.serve) die("--serve: this executable has no tokenizer");
    if (!G.tok && !o.ids && !o.tokenize && !o.ppl_path)
        die("this executable has no tokenizer: give --prompt-ids and --ids");
    if (!G.tok && o.prompt) die("this executable has no tokenizer: give --prompt-ids, not --prompt");
    /* no prompt: a chat on a terminal (where the model has a chat template), else the text on stdin */
    if (G.tok && !o.prompt && !o.prompt_ids && !o.interactive && !o.serve && !o.ppl_path) {
        if (!isatty(0)) {
            G.prompt_read = read_text("-", "the prompt on stdin", true);
            if (*G.prompt_read) o.prompt = G.prompt_read;
        } else o.interactive = tokenizer_has_chat(G.tok) && !o.chat_off && !o.tokenize;
    }

    /* chat: the template applies to text turns (--prompt, -i) */
    bool has_tpl = G.tok && tokenizer_has_chat(G.tok);
    if ((o.chat_on || o.system || o.interactive) && !has_tpl)
        die("%s needs a chat template, and this model's tokenizer has none",
            o.interactive ? "-i" : o.system ? "--system" : "--chat");
    if (o.chat_off && (o.system || o.interactive))
        die("%s needs the chat template: drop --no-chat", o.interactive ? "-i" : "--system");
    if (o.system && !o.prompt && !o.interactive && !o.serve)
        die("--system goes with the user's message: give --prompt TEXT, -i or --serve");
    const bool chat = has_tpl && !o.chat_off && (o.prompt || o.interactive);
    G.think_open = G.tok ? tokenizer_token_id(G.tok, "<think>") : -1;
    G.think_close = G.tok ? tokenizer_token_id(G.tok, "</think>") : -1;
    if (o.think != TOK_THINK_DEFAULT) {
        const char *flag = o.think ? "--think" : "--no-think";
        if (!has_tpl || !tokenizer_chat_has_thinking(G.tok))
            die("%s: this model's chat template has no thinking switch", flag);
        if (o.chat_off) die("%s: the thinking switch is part of the chat template: drop --no-chat", flag);
        if (!chat) die("%s goes with the user's message: give --prompt TEXT or -i", flag);
    }
    if (o.hide_thinking && (G.think_open < 0 || G.think_close < 0))
        die("--hide-thinking: this model's tokenizer has no <think> and </think> tokens");

    G.ctx = o.ctx;
    G.logits = malloc((size_t)V * sizeof *G.logits);
    if (!G.logits || session_init(&G.sess, NULL, 0, G.tok, G.ctx, G.logits)) die("out of memory");
    if (chat && chat_init(&G.chat, G.tok, &G.sess, o.system, o.think)) die("out of memory");
    if (o.kwargs && !chat) die("--chat-template-kwargs goes with the user's message: give --prompt TEXT or -i");
    G.chat.kwargs = o.kwargs;
    if ((o.grammar || o.grammar_file || o.json) && !G.tok)
        die("%s: this executable has no tokenizer", o.json ? "--json" : o.grammar ? "--grammar" : "--grammar-file");
    if (o.grammar || o.grammar_file || o.json) {   /* each reply keeps to it: compiled once, its states reused */
        char *text = o.grammar_file ? read_text(o.grammar_file, "--grammar-file", false) : NULL;
        const char *src = o.json ? grammar_json_object_gbnf : text ? text : o.grammar;
        char err[512];
        G.grammar = grammar_compile(src, strlen(src), err, sizeof err);
        free(text);
        if (!G.grammar)
            die("%s%s: %s", o.grammar_file ? "--grammar-file " : "--grammar", o.grammar_file ? o.grammar_file : "",
                err);
        if (!(G.gvocab = session_grammar_vocab(G.tok, &G.gvocab_bytes))) die("out of memory");
    }

    /* the prompt, in G.pending */
    int np = 0;
    if (o.ppl_path || o.serve) np = 0;   /* --perplexity reads its own text, --serve its requests' */
    else if (o.prompt_ids) np = parse_ids(o.prompt_ids, V);
    else if (chat && o.prompt) {
        np = chat_message_ids(&G.chat, o.prompt, strlen(o.prompt), 0, &G.pending);
        if (np == -1) die("out of memory");
        if (np == -3) die("the chat template refused the prompt: %s", G.chat.error);
        if (np == -2) too_long("the prompt", G.chat.too_long, "");
    }
    else if (chat) np = 0;          /* -i without --prompt: the first turn comes from stdin */
    else if (G.tok) {
        const char *text = o.prompt ? o.prompt : "";
        np = tokenizer_encode(G.tok, text, strlen(text), true, &G.pending);
        if (np < 0) die("out of memory");
        if (np == 0) die("the prompt is empty and this model adds no BOS token: give a --prompt");
    } else {
        if (mi->bos_id < 0) die("no prompt: give --prompt-ids");
        G.pending = malloc(sizeof *G.pending);
        if (!G.pending) die("out of memory");
        G.pending[0] = mi->bos_id;
        np = 1;
    }
    check_ids(G.pending, np);
    if (o.tokenize) {
        char b[16];
        for (int i = 0; i < np; i++) {
            int l = snprintf(b, sizeof b, i ? " %d" : "%d", G.pending[i]);
            out_write(b, (size_t)l);
        }
        out_write("\n", 1);
        finish();
    }
    if (np > G.ctx) too_long("the prompt", np, "");

    if (o.logits_path) {
        G.logits_f = fopen(o.logits_path, "wb");
        if (!G.logits_f) die("--logits %s: %s", o.logits_path, strerror(errno));
    }

    /* the weights' pages mapped now, not a fault at a time in the first prompt; a CUDA build reads them once, to
     * copy them to the GPU (model_host.h's mem_upload), which faults them in as it goes */
    double t_weights = now_s();
    if (!on_gpu()) payload_prefault(&G.pl);
    err = model_init_slots(&G.model, G.pl.tensors, G.pl.base, G.ctx, o.serve ? o.so.parallel : 1);
    if (err) { G.model = NULL; die("%s", err); }
    G.t_weights = now_s() - t_weights + (G.pl.compressed ? t_open : 0);
    G.t_ready = now_s() - G.t_start;
    model_use_graph(G.model, !G.no_graph);
    G.sess.model = G.model;
    sampler_seed(&G.sess.smp, o.has_seed ? o.seed
                              : (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32) ^
                                (unsigned long long)(now_s() * 1e9));

    if (o.ppl_path) {
        perplexity(&o);
        cleanup();
        return 0;
    }
    if (o.serve) {
        o.so.stats = o.stats;
        ServeModel sm = { G.model, G.tok, G.ctx, o.sp, o.system, G.compute };
        int status = serve_run(&o.so, &sm);
        cleanup();
        return status;
    }
    Stats st = {0};
    if (o.interactive) catch_sigint(true);
    /* chat prints only the reply; a chat's replies have no cap by default */
    if (np > 0) turn(&o, G.pending, np, !chat, o.has_n ? o.max_new : o.interactive ? -1 : DEFAULT_MAX_NEW, &st);
    free(G.pending);
    G.pending = NULL;
    if (o.interactive) {
        if (np > 0 && chat_add_reply(&G.chat)) die("out of memory");
        converse(&o, &st);
    }
    if (G.logits_f) {
        FILE *f = G.logits_f;
        G.logits_f = NULL;
        if (fclose(f) != 0) die("--logits %s: %s", o.logits_path, strerror(errno));
    }
    if (o.stats) {
        double tp = st.t_prefill, td = st.t_decode;
        fprintf(stderr, "compute: %s\n", G.compute);
        size_t wb = 0;
        model_memory_bytes(G.model, &wb, NULL, NULL);
        fprintf(stderr, "start-up: %.1f ms (the weights %s in %.1f ms: %.1f MB, %.2f GB/s)\n", G.t_ready * 1e3,
                on_gpu() ? "copied to the GPU" : G.pl.compressed ? "decompressed" : "mapped", G.t_weights * 1e3,
                wb / 1e6,
                G.t_weights > 0 ? wb / G.t_weights / 1e9 : 0.0);
        fprintf(stderr, "prompt tokens: %ld\n", st.n_prompt);
        fprintf(stderr, "prompt: %.2f tok/s (%.1f ms)\n", tp > 0 ? st.n_prompt / tp : 0.0, tp * 1e3);
        fprintf(stderr, "generated tokens: %ld\n", st.n_gen);
        fprintf(stderr, "decode: %.2f tok/s (%ld steps, %.1f ms)\n", td > 0 ? st.n_decode / td : 0.0, st.n_decode,
                td * 1e3);
        /* what a step must read at least: the weights once (model_info: the embedding one row); the KV cache and
         * activations come on top */
        double wbytes = (double)model_info.decode_weight_bytes;
        fprintf(stderr, "decode reads: %.1f MB of weights a token (%.1f GB/s at this speed)\n", wbytes / 1e6,
                td > 0 ? wbytes * st.n_decode / td / 1e9 : 0.0);
        launches_line(stderr);
        fprintf(stderr, "sampled: %ld by the device's argmax, %ld from its top-k "
                "(%ld of them from the logits: a tie at the k-th), %ld from the logits\n",
                st.n_argmax, st.n_topk, G.sess.topk_ties, st.n_gen - st.n_argmax - st.n_topk);
        if (G.grammar && G.sess.n_grammar) {
            GrammarStats gst = grammar_stats(G.grammar);
            double per = G.sess.t_grammar / (double)G.sess.n_grammar, step = st.n_decode ? td / st.n_decode : 0;
            fprintf(stderr, "grammar: %.3f ms a token (%.1f%% of a decode step), masks %ld computed, %ld from the "
                    "cache\n", per * 1e3, step > 0 ? 100 * per / step : 0.0, gst.masks_computed, gst.masks_cached);
        }
        if (G.think_open >= 0) fprintf(stderr, "reasoning tokens: %ld of the generated\n", st.n_think);
        if (st.turns > 1) fprintf(stderr, "turns: %d\n", st.turns);
        if (st.turns > 0)
            fprintf(stderr, "time to first token: %.1f ms (%.1f ms from the program's start)\n", st.t_first * 1e3,
                    st.t_first_start * 1e3);
    }
    cleanup();
    return 0;
}
