/* cmd_tokenize.c: `llmcc tokenize DIR [--no-special] [TEXT]` (with --chat,
 * --system, --chat-messages: through the chat template) and
 * `llmcc detokenize DIR [--show-special] ID...`, through the same packed blob
 * and runtime code that the emitted binaries use, so what these print is
 * what a compiled model will see. DIR may be a GGUF file instead (chosen by
 * its magic or a .gguf name, as `llmcc inspect` chooses). */
#include "tokenizer_pack.h"
#include "tokenizer.h"
#include "json.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* chat: pack the chat template too (otherwise an unknown template does not matter here).
 * *tpl_where: the file and key a chat template would be read from, for "there is none". */
static Tokenizer *load_dir(Arena *a, const char *dir, bool chat, const char **tpl_file, const char **tpl_key) {
    size_t size;
    TokPackOpts po = { .no_chat = !chat };
    uint8_t *blob;
    if (gguf_is_gguf_path(dir)) {
        GgufFile g = {0};
        gguf_open(a, dir, &g);
        /* the blob holds copies of the strings it needs: the mapping can go */
        blob = tokenizer_pack_gguf(a, &g, dir, &po, &size);
        gguf_close(&g);
        if (!blob) die_user(dir, "tokenizer.ggml.model", "absent: this GGUF file has no tokenizer");
        *tpl_file = dir; *tpl_key = "tokenizer.chat_template";
    } else {
        if (!dir_exists(dir)) die_user(dir, NULL, "not a directory or a GGUF file");
        blob = tokenizer_pack_opts(a, dir, &po, &size);
        if (!blob) die_user(dir, NULL, "no tokenizer.json in this model directory");
        *tpl_file = path_join(a, dir, "tokenizer_config.json"); *tpl_key = "chat_template";
    }
    Tokenizer *t;
    const char *err = tokenizer_load(&t, blob, size);
    if (err) die_internal(__FILE__, __LINE__, "packed tokenizer does not load: %s", err);
    return t;
}

#define TOKENIZE_USAGE "usage: llmcc tokenize DIR|FILE.gguf [--no-special] [--chat [--system TEXT] | " \
                       "--chat-messages FILE.json [--tools FILE.json]] [--think | --no-think] " \
                       "[--chat-template-kwargs JSON] [--text] [TEXT]"

static void print_ids(const Tokenizer *t, const char *s, size_t n, bool special) {
    int32_t *ids;
    int k = tokenizer_encode(t, s, n, special, &ids);
    if (k < 0) die_user(NULL, NULL, "out of memory while tokenizing");
    for (int i = 0; i < k; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    free(ids);
}

/* Renders one conversation (messages: a JSON list) and prints its ids (or, text: the rendered text). think:
 * enable_thinking (0, 1), or TOK_THINK_DEFAULT; kwargs: more template variables (a JSON object) or NULL. */
static void print_chat(const Tokenizer *t, const char *messages, size_t n, bool text, int think, const char *kwargs,
                       const char *tools, const char *tpl_file, const char *tpl_key) {
    size_t len;
    char err[700];
    ChatRequest r = {.messages = messages, .messages_len = n, .kwargs = kwargs,
                     .kwargs_len = kwargs ? strlen(kwargs) : 0, .tools = tools, .tools_len = tools ? strlen(tools) : 0,
                     .add_generation_prompt = true, .think = think};
    char *out = tokenizer_chat_apply(t, &r, &len, err, sizeof err);
    if (!out) die_user(tpl_file, tpl_key, "%s", err);
    /* transformers encodes the rendered text with add_special_tokens=False */
    if (text) fwrite(out, 1, len, stdout);
    else print_ids(t, out, len, false);
    free(out);
}

int cmd_tokenize(int argc, char **argv) {
    const char *dir = NULL, *text = NULL, *system = NULL, *msgs_path = NULL, *kwargs = NULL, *tools_path = NULL;
    bool special = true, chat = false, print_text = false;
    int think = TOK_THINK_DEFAULT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--no-special") == 0) special = false;
        else if (strcmp(a, "--chat") == 0) chat = true;
        else if (strcmp(a, "--text") == 0) print_text = true;
        else if (strcmp(a, "--think") == 0 || strcmp(a, "--no-think") == 0) {
            if (think != TOK_THINK_DEFAULT) die_user(NULL, a, "give --think or --no-think once");
            think = a[2] == 't';
            chat = true;
        }
        else if (strcmp(a, "--tools") == 0) {
            if (i + 1 >= argc) die_user(NULL, a, "needs a value");
            tools_path = argv[++i];
        }
        else if (strcmp(a, "--chat-template-kwargs") == 0) {
            if (i + 1 >= argc) die_user(NULL, a, "needs a value");
            kwargs = argv[++i];
            chat = true;
        }
        else if (strcmp(a, "--system") == 0 || strcmp(a, "--chat-messages") == 0) {
            if (i + 1 >= argc) die_user(NULL, a, "needs a value");
            if (a[2] == 's') system = argv[++i]; else msgs_path = argv[++i];
            chat = true;
        }
        else if (a[0] == '-' && a[1]) die_user(NULL, a, "tokenize: unknown option (" TOKENIZE_USAGE ")");
        else if (!dir) dir = a;
        else if (!text) text = a;
        else die_user(NULL, NULL, "tokenize: unexpected argument \"%s\" (" TOKENIZE_USAGE ")", a);
    }
    if (!dir) die_user(NULL, NULL, TOKENIZE_USAGE);
    if (msgs_path && (text || system))
        die_user(NULL, "--chat-messages", "the messages file holds every message: give no TEXT or --system");
    if (chat && !special)
        die_user(NULL, "--no-special", "does not go with the chat template, whose special tokens are the point");
    if (print_text && !chat) die_user(NULL, "--text", "prints the chat template's text: give --chat too");
    if (tools_path && !msgs_path) die_user(NULL, "--tools", "goes with --chat-messages");
    Arena a = {0};
    const char *tpl_file, *tpl_key;
    Tokenizer *t = load_dir(&a, dir, chat, &tpl_file, &tpl_key);
    if (chat && !tokenizer_has_chat(t))
        die_user(tpl_file, tpl_key, "none: this tokenizer has no chat template");
    if (think != TOK_THINK_DEFAULT && !tokenizer_chat_has_thinking(t))
        die_user(NULL, think ? "--think" : "--no-think", "this chat template has no thinking switch (enable_thinking)");
    if (kwargs) {
        Json kj;
        json_parse(&a, &kj, "--chat-template-kwargs", kwargs, strlen(kwargs));
        if (json_type(&kj, 0) != JSON_OBJECT) die_user(NULL, "--chat-template-kwargs", "expected a JSON object");
    }
    Str in = {0};
    if (text) str_append(&in, text, strlen(text));
    else if (!msgs_path) {
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) str_append(&in, buf, n);
        if (ferror(stdin)) die_user("stdin", NULL, "read error: %s", strerror(errno));
    }
    const char *src = in.s ? in.s : "";
    const char *tools = NULL;
    if (tools_path) {
        Json tj;
        json_load_file(&a, &tj, tools_path);
        if (json_type(&tj, 0) != JSON_ARRAY) die_user(tools_path, "--tools", "expected a JSON list of tools");
        tools = arena_strndup(&a, tj.src, tj.len);
    }
    if (msgs_path) {
        /* one conversation, or a list of them: one line of ids each */
        Json j;
        json_load_file(&a, &j, msgs_path);
        bool many = json_type(&j, 0) == JSON_ARRAY && json_size(&j, 0) > 0 && json_type(&j, 1) == JSON_ARRAY;
        if (many && print_text) die_user(NULL, "--text", "prints one conversation: the file holds a list of them");
        int k = many ? 1 : 0;
        for (int c = 0; c < (many ? json_size(&j, 0) : 1); c++, k = json_next(&j, k)) {
            if (json_type(&j, k) != JSON_ARRAY || json_size(&j, k) == 0)
                die_user(msgs_path, many ? arena_printf(&a, "[%d]", c) : NULL,
                         "expected a list of messages ({\"role\": ..., \"content\": ...})");
            print_chat(t, j.src + j.tok[k].start, (size_t)(j.tok[k].end - j.tok[k].start), print_text, think, kwargs,
                       tools, tpl_file, tpl_key);
        }
    } else if (chat) {
        ChatMsg m[2];
        int nm = 0;
        if (system) m[nm++] = (ChatMsg){ "system", system, strlen(system) };
        m[nm++] = (ChatMsg){ "user", src, in.len };
        char err[700];
        size_t len;
        char *out = tokenizer_chat_render(t, m, nm, true, think, kwargs, &len, err, sizeof err);
        if (!out) die_user(tpl_file, tpl_key, "%s", err);
        if (print_text) fwrite(out, 1, len, stdout);
        else print_ids(t, out, len, false);
        free(out);
    } else {
        print_ids(t, src, in.len, special);
    }
    str_free(&in);
    tokenizer_free(t); arena_free(&a);
    return 0;
}

int cmd_detokenize(int argc, char **argv) {
    const char *dir = NULL;
    bool show = false;
    int nid = 0;
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)(argc + 1));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--show-special") == 0) { show = true; continue; }
        if (!dir) { dir = argv[i]; continue; }
        char *end;
        errno = 0;
        long v = strtol(argv[i], &end, 10);
        if (errno || end == argv[i] || *end || v < 0 || v > INT32_MAX)
            die_user(NULL, NULL, "detokenize: \"%s\" is not a token id", argv[i]);
        ids[nid++] = (int32_t)v;
    }
    if (!dir) die_user(NULL, NULL, "usage: llmcc detokenize DIR|FILE.gguf [--show-special] ID...");
    Arena a = {0};
    const char *tpl_file, *tpl_key;
    Tokenizer *t = load_dir(&a, dir, false, &tpl_file, &tpl_key);
    int vs = tokenizer_vocab_size(t);
    for (int i = 0; i < nid; i++)
        if (ids[i] >= vs) die_user(NULL, NULL, "detokenize: id %d is outside the vocabulary (size %d)", ids[i], vs);
    char *s = tokenizer_decode(t, ids, nid, show);
    if (!s) die_user(NULL, NULL, "out of memory");
    fputs(s, stdout);        /* exactly the text: no newline added */
    free(s); free(ids);
    tokenizer_free(t); arena_free(&a);
    return 0;
}
