/* cmd_chat_template.c: `llmcc chat-template SOURCE --messages FILE.json [--add-generation-prompt]
 * [--tools FILE.json] [--kwargs JSON] [--now YYYY-MM-DDTHH:MM:SS]`: the text a chat template renders, printed and
 * nothing else, through the runtime's Jinja interpreter (runtime/jinja.c), the one the executables run. The tool
 * people reach for when a template misbehaves: SOURCE is a model directory (tokenizer_config.json's chat_template
 * or chat_template.jinja), a GGUF file (tokenizer.chat_template) or a template file. The variables are those
 * transformers' apply_chat_template passes: messages, tools (none without --tools), documents (none),
 * add_generation_prompt, the checkpoint's bos_token and eos_token, then --kwargs' keys, which override them. */
#include "gguf.h"
#include "json.h"
#include "tokenizer_pack.h"
#include "tokenizer.h"
#include "util.h"
#include "../runtime/jinja.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char CHAT_TEMPLATE_USAGE[] =
    "usage: llmcc chat-template SOURCE --messages FILE.json [--add-generation-prompt] [--tools FILE.json]\n"
    "                           [--kwargs JSON] [--now YYYY-MM-DDTHH:MM:SS]\n"
    "Prints the text SOURCE's chat template renders for the conversation, as transformers' apply_chat_template\n"
    "renders it (jinja2 with trim_blocks and lstrip_blocks), and nothing else.\n"
    "  SOURCE                   a model directory, a GGUF file or a template file (.jinja)\n"
    "  --messages FILE.json     the conversation as OpenAI's messages: [{\"role\": ..., \"content\": ...}, ...]\n"
    "  --add-generation-prompt  end with the assistant's turn opened\n"
    "  --tools FILE.json        the tools offered, as OpenAI's tools list (default: none)\n"
    "  --kwargs JSON            more template variables, a JSON object ({\"enable_thinking\": false}); bos_token\n"
    "                           and eos_token here replace the checkpoint's\n"
    "  --now TIME               the clock strftime_now reads (default: the local time)\n";

/* where the template and its special tokens come from, for messages */
typedef struct { const char *tpl; size_t len; const char *bos, *eos; const char *file, *key; } TemplateSource;

/* tokenizer_config.json's bos_token / eos_token: a string or {"content": ...} */
static const char *config_token_text(Arena *a, const Json *j, const char *key) {
    int t = json_find(j, 0, key);
    if (t < 0 || json_is_null(j, t)) return NULL;
    if (json_type(j, t) == JSON_OBJECT) t = json_find(j, t, "content");
    return json_get_str(a, j, t, NULL);
}

static void source_of_dir(Arena *a, const char *dir, TemplateSource *s) {
    char *cpath = path_join(a, dir, "tokenizer_config.json");
    if (file_exists(cpath)) {
        Json cj;
        json_load_file(a, &cj, cpath);
        if (json_type(&cj, 0) != JSON_OBJECT) die_user(cpath, NULL, "expected a JSON object");
        s->bos = config_token_text(a, &cj, "bos_token");
        s->eos = config_token_text(a, &cj, "eos_token");
        int ct = json_find(&cj, 0, "chat_template");
        if (ct >= 0 && json_type(&cj, ct) == JSON_ARRAY) {   /* [{"name": "default", "template": ...}, ...] */
            int k = ct + 1, hit = -1;
            for (int i = 0; i < json_size(&cj, ct); i++, k = json_next(&cj, k))
                if (json_str_eq(&cj, json_find(&cj, k, "name"), "default")) hit = json_find(&cj, k, "template");
            if (hit < 0) die_user(cpath, "chat_template", "a list of templates without a \"default\" one");
            ct = hit;
        }
        if (ct >= 0 && !json_is_null(&cj, ct)) {
            s->tpl = json_get_str(a, &cj, ct, &s->len);
            if (!s->tpl) die_user(cpath, "chat_template", "expected a string");
            s->file = cpath;
            s->key = "chat_template";
            return;
        }
    }
    char *jp = path_join(a, dir, "chat_template.jinja");
    if (!file_exists(jp)) die_user(dir, NULL, "no chat template (tokenizer_config.json's chat_template or "
                                              "chat_template.jinja)");
    char *t = read_file(jp, &s->len);
    if (!t) die_user(jp, NULL, "cannot read");
    s->tpl = arena_strndup(a, t, s->len);
    free(t);
    s->file = jp;
}

/* a GGUF file's tokenizer.chat_template; bos and eos as the text of their ids in tokenizer.ggml.tokens */
static void source_of_gguf(Arena *a, const char *path, TemplateSource *s) {
    GgufFile g = {0};
    gguf_open(a, path, &g);
    GgufStr tpl;
    if (!gguf_get_str(&g, "tokenizer.chat_template", &tpl))
        die_user(path, "tokenizer.chat_template", "absent: this GGUF file has no chat template");
    s->tpl = arena_strndup(a, tpl.s, (size_t)tpl.len);
    s->len = (size_t)tpl.len;
    s->file = path;
    s->key = "tokenizer.chat_template";
    const GgufKV *tokens;
    if (gguf_get_array(&g, "tokenizer.ggml.tokens", GGUF_STRING, &tokens)) {
        static const char *const keys[2] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
        for (int i = 0; i < 2; i++) {
            int64_t id;
            if (!gguf_get_int(&g, keys[i], &id) || id < 0 || (uint64_t)id >= tokens->count) continue;
            GgufStr t = gguf_kv_str(tokens, (uint64_t)id);
            *(i ? &s->eos : &s->bos) = arena_strndup(a, t.s, (size_t)t.len);
        }
    }
    gguf_close(&g);
}

/* s as a JSON string after b's text (runtime/tokenizer.c's writer) */
static void json_quote(Str *b, const char *s) {
    if (!tokenizer_json_quote(&b->s, &b->len, &b->cap, s, strlen(s))) die_internal(__FILE__, __LINE__, "oom");
}

/* FILE's text, checked to be JSON of the type wanted */
static char *json_file(Arena *a, const char *path, const char *flag, JsonType want, const char *what) {
    Json j;
    json_load_file(a, &j, path);
    if (json_type(&j, 0) != want) die_user(path, flag, "expected %s", what);
    return arena_strndup(a, j.src, j.len);
}

int cmd_chat_template(int argc, char **argv) {
    Arena a = {0};
    const char *source = NULL, *messages = NULL, *tools = NULL, *kwargs = NULL, *now_text = NULL;
    bool agp = false;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { fputs(CHAT_TEMPLATE_USAGE, stdout); return 0; }
        bool takes = !strcmp(o, "--messages") || !strcmp(o, "--tools") || !strcmp(o, "--kwargs") ||
                     !strcmp(o, "--now");
        if (takes && i + 1 >= argc) die_user(NULL, o, "needs a value");
        if (!strcmp(o, "--messages")) messages = argv[++i];
        else if (!strcmp(o, "--tools")) tools = argv[++i];
        else if (!strcmp(o, "--kwargs")) kwargs = argv[++i];
        else if (!strcmp(o, "--now")) now_text = argv[++i];
        else if (!strcmp(o, "--add-generation-prompt")) agp = true;
        else if (o[0] == '-' && o[1]) die_user(NULL, o, "unknown option (see llmcc chat-template --help)");
        else if (!source) source = o;
        else die_user(NULL, o, "one SOURCE only (see llmcc chat-template --help)");
    }
    if (!source || !messages) {
        fputs(CHAT_TEMPLATE_USAGE, stderr);
        return 2;
    }
    TemplateSource s = {0};
    if (dir_exists(source)) source_of_dir(&a, source, &s);
    else if (gguf_is_gguf_path(source)) source_of_gguf(&a, source, &s);
    else {
        char *t = read_file(source, &s.len);
        if (!t) die_user(source, NULL, "not found, or not a model directory, GGUF file or template file");
        s.tpl = arena_strndup(&a, t, s.len);
        free(t);
        s.file = source;
    }

    struct tm now = {0}, *nowp = NULL;
    if (now_text) {
        int y, mo, d, h, mi, se;
        char tail;
        if (sscanf(now_text, "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &se, &tail) != 6 || mo < 1 ||
            mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
            die_user(NULL, "--now", "'%s' is not YYYY-MM-DDTHH:MM:SS", now_text);
        now = (struct tm){.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi,
                          .tm_sec = se, .tm_isdst = -1};
        struct tm norm = now;
        (void)timegm(&norm);   /* the weekday and day of the year, which %a and %j print */
        now.tm_wday = norm.tm_wday;
        now.tm_yday = norm.tm_yday;
        nowp = &now;
    }

    /* the variables: ours first, --kwargs' after them (a key given twice: the later one holds) */
    Str vars = {0};
    str_printf(&vars, "{\"messages\": %s, \"tools\": %s, \"documents\": null, \"add_generation_prompt\": %s",
               json_file(&a, messages, "--messages", JSON_ARRAY, "a JSON list of messages"),
               tools ? json_file(&a, tools, "--tools", JSON_ARRAY, "a JSON list of tools") : "null",
               agp ? "true" : "false");
    if (s.bos) { str_printf(&vars, ", \"bos_token\": "); json_quote(&vars, s.bos); }
    if (s.eos) { str_printf(&vars, ", \"eos_token\": "); json_quote(&vars, s.eos); }
    if (kwargs) {
        Json kj;
        json_parse(&a, &kj, "--kwargs", kwargs, strlen(kwargs));
        if (json_type(&kj, 0) != JSON_OBJECT) die_user(NULL, "--kwargs", "expected a JSON object");
        for (int k = json_obj_first(&kj, 0); k >= 0; k = json_obj_next(&kj, 0, k)) {
            str_printf(&vars, ", ");
            for (int t = k; t <= k + 1; t++) {   /* the key and its value as written (a string's quotes back) */
                const char *q = json_type(&kj, t) == JSON_STRING ? "\"" : "";
                str_printf(&vars, "%s%.*s%s%s", q, kj.tok[t].end - kj.tok[t].start, kj.src + kj.tok[t].start, q,
                           t == k ? ": " : "");
            }
        }
    }
    str_printf(&vars, "}");

    JinjaError err;
    char msg[700];
    JinjaTemplate *t = jinja_parse(s.tpl, s.len, &err);
    if (!t) {
        jinja_error_string(&err, msg, sizeof msg);
        die_user(s.file, s.key, "%s", msg);
    }
    size_t len;
    char *text = jinja_render(t, vars.s, vars.len, nowp, NULL, &len, &err);
    jinja_free(t);
    str_free(&vars);
    if (!text && err.kind == JINJA_ERR_RAISE)   /* the template's own message, as jinja2 raises it */
        die_user(s.file, s.key, "line %d: raise_exception: %s", err.line, err.message);
    if (!text) {
        jinja_error_string(&err, msg, sizeof msg);
        die_user(s.file, s.key, "%s", msg);
    }
    fwrite(text, 1, len, stdout);
    free(text);
    arena_free(&a);
    return 0;
}
