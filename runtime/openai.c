/* openai.c: see openai.h. Request bodies are read by runtime/json.c, the compiler's reader too, and strings in
 * them must be valid UTF-8 (json_string strict); a fault is answered with the field that holds it, as OpenAI's
 * server does, and a feature this server lacks (logprobs, n > 1) is refused by name, not ignored. A chat's
 * messages, tools and chat_template_kwargs go to the model's chat template as JSON (runtime/jinja.c). */
#include "openai.h"
#include "json.h"
#include "json_schema.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void api_fail(ApiError *e, int status, const char *type, const char *param, const char *code,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void api_fail(ApiError *e, int status, const char *type, const char *param, const char *code,
                     const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}
#define BAD_REQUEST(e, param, ...) api_fail(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)
#define SERVER_OOM(e) api_fail(e, 500, "server_error", NULL, NULL, "out of memory")

void api_request_free(ApiRequest *r) {
    free(r->messages);
    free(r->tools);
    free(r->kwargs);
    free(r->prompt);
    free(r->prompt_ids);
    free(r->model_asked);
    free(r->grammar);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* The string token i decoded into a malloc'd NUL-terminated text; NULL when it is not a string, or is not valid
 * UTF-8 (*why says which). */
static char *json_text(const Json *j, int i, size_t *len, const char **why) {
    *why = "must be a string";
    size_t room = json_string_room(j, i), at;
    if (!room) return NULL;
    char *text = malloc(room);
    if (!text) { *why = "is too large (out of memory)"; return NULL; }
    if (json_string(j, i, text, len, true, &at) == JSON_OK) return text;
    *why = "is not valid UTF-8";
    free(text);
    return NULL;
}

/* The value at token t as JSON text into b (a string's escapes as written), false where a string is not valid
 * UTF-8. The request was read strictly: what is copied is JSON. */
static bool json_copy(Buf *b, const Json *j, int t) {
    const JsonTok *tok = &j->tok[t];
    if (json_type(j, t) == JSON_STRING) {
        size_t room = json_string_room(j, t), len, at;
        char *text = malloc(room);
        if (!text) { b->oom = true; return true; }
        bool ok = json_string(j, t, text, &len, true, &at) == JSON_OK;
        if (ok) buf_json_str(b, text, len);
        free(text);
        return ok;
    }
    if (json_type(j, t) != JSON_OBJECT && json_type(j, t) != JSON_ARRAY) {
        buf_add(b, j->src + tok->start, (size_t)(tok->end - tok->start));
        return true;
    }
    bool obj = json_type(j, t) == JSON_OBJECT;
    buf_str(b, obj ? "{" : "[");
    int k = t + 1;
    for (int i = 0; i < json_size(j, t); i++) {
        if (i) buf_str(b, ", ");
        if (obj) {
            if (!json_copy(b, j, k)) return false;
            buf_str(b, ": ");
            k++;
        }
        if (!json_copy(b, j, k)) return false;
        k = json_next(j, k);
    }
    buf_str(b, obj ? "}" : "]");
    return true;
}

/* a message's tool_calls, each function's arguments an object where OpenAI's wire format gives a string that
 * holds one (templates write arguments | tojson, or iterate them) */
static bool copy_tool_calls(Buf *b, const Json *j, int calls) {
    buf_str(b, "[");
    int c = calls + 1;
    for (int i = 0; i < json_size(j, calls); i++, c = json_next(j, c)) {
        if (i) buf_str(b, ", ");
        int fn = json_find(j, c, "function"), args = json_find(j, fn, "arguments");
        if (json_type(j, c) != JSON_OBJECT || args < 0 || json_type(j, args) != JSON_STRING) {
            if (!json_copy(b, j, c)) return false;
            continue;
        }
        size_t room = json_string_room(j, args), len, at;
        char *text = malloc(room);
        if (!text) { b->oom = true; return true; }
        Json inner = {0};
        bool read = json_string(j, args, text, &len, true, &at) == JSON_OK &&
                    json_read(&inner, text, len, &at) == JSON_OK;   /* its tokens to free, whatever they hold */
        bool parsed = read && json_bad_token(&inner) < 0 && json_type(&inner, 0) == JSON_OBJECT;
        buf_str(b, "{");
        int n = 0;
        for (int key = json_obj_first(j, c); key >= 0; key = json_obj_next(j, c, key)) {
            if (json_is_null(j, key + 1)) continue;
            if (n++) buf_str(b, ", ");
            if (!json_copy(b, j, key)) { json_free(&inner); free(text); return false; }
            buf_str(b, ": ");
            if (key + 1 != fn) {
                if (!json_copy(b, j, key + 1)) { json_free(&inner); free(text); return false; }
                continue;
            }
            buf_str(b, "{");
            int m = 0;
            for (int fk = json_obj_first(j, fn); fk >= 0; fk = json_obj_next(j, fn, fk)) {
                if (json_is_null(j, fk + 1)) continue;
                if (m++) buf_str(b, ", ");
                if (!json_copy(b, j, fk)) { json_free(&inner); free(text); return false; }
                buf_str(b, ": ");
                bool ok = fk + 1 == args && parsed ? json_copy(b, &inner, 0) : json_copy(b, j, fk + 1);
                if (!ok) { json_free(&inner); free(text); return false; }
            }
            buf_str(b, "}");
        }
        buf_str(b, "}");
        json_free(&inner);
        free(text);
    }
    buf_str(b, "]");
    return true;
}

/* ---------------------------------------------------------------- requests */
/* The body read as a JSON object into j; false with *err (400) where it is not one */
static bool read_object(Json *j, const char *body, size_t len, ApiError *err) {
    size_t at;
    JsonError read = json_read(j, body ? body : "", len, &at);
    if (read == JSON_ERR_OOM) {
        SERVER_OOM(err);
    } else if ((read != JSON_OK && read != JSON_ERR_TRAILING) || json_bad_token(j) >= 0) {
        BAD_REQUEST(err, NULL, "the body is not valid JSON");
    } else if (read == JSON_ERR_TRAILING || json_type(j, 0) != JSON_OBJECT) {
        BAD_REQUEST(err, NULL, "the body is not a JSON object");
    } else {
        return true;
    }
    json_free(j);
    return false;
}

bool api_parse_request(ApiRequest *r, const char *body, size_t len, bool chat, const SampleParams *defaults,
                       ApiError *err) {
    api_request_free(r);
    r->chat = chat;
    r->sp = *defaults;
    r->max_tokens = -1;
    r->think = TOK_THINK_DEFAULT;
    Json j;
    if (!read_object(&j, body, len, err)) return false;
    bool ok = false;
    const char *why;
    char field[64];
    double v;
    bool flag;
    int k;
    Buf mb = {0};   /* the chat's messages as the template gets them */
    /* the text */
    if (chat) {
        k = json_find(&j, 0, "messages");
        if (k < 0) { BAD_REQUEST(err, "messages", "messages: missing (an array of messages)"); goto out; }
        if (json_type(&j, k) != JSON_ARRAY || json_size(&j, k) == 0) {
            BAD_REQUEST(err, "messages", "messages: must be a non-empty array");
            goto out;
        }
        /* the messages as the template gets them: roles as they come ("developer" is "system"), content a
         * string (text parts joined by newlines), keys whose value is null dropped (as transformers does), a tool
         * call's arguments an object where the string holds one (as vLLM and llama.cpp give them) */
        buf_str(&mb, "[");
        int m = k + 1;
        for (int e = 0; e < json_size(&j, k); e++, m = json_next(&j, m)) {
            snprintf(field, sizeof field, "messages[%d]", e);
            if (json_type(&j, m) != JSON_OBJECT) { BAD_REQUEST(err, field, "%s: must be an object", field); goto out; }
            int role = json_find(&j, m, "role"), content = json_find(&j, m, "content");
            if (json_type(&j, role) != JSON_STRING) {
                snprintf(field, sizeof field, "messages[%d].role", e);
                BAD_REQUEST(err, field, "%s: must be a string (\"system\", \"user\", \"assistant\", \"tool\", ...)",
                            field);
                goto out;
            }
            r->has_system |= json_str_eq(&j, role, "system") || json_str_eq(&j, role, "developer");
            bool calls = json_find(&j, m, "tool_calls") >= 0 && !json_is_null(&j, json_find(&j, m, "tool_calls"));
            snprintf(field, sizeof field, "messages[%d].content", e);
            if ((content < 0 || json_is_null(&j, content)) && !json_str_eq(&j, role, "assistant") && !calls) {
                BAD_REQUEST(err, field, "%s: missing", field);
                goto out;
            }
            buf_str(&mb, e ? ", {" : "{");
            int fields = 0;
            for (int key = json_obj_first(&j, m); key >= 0; key = json_obj_next(&j, m, key)) {
                int val = key + 1;
                if (json_is_null(&j, val)) continue;
                buf_str(&mb, fields++ ? ", " : "");
                if (key + 1 == role && json_str_eq(&j, role, "developer")) {
                    buf_str(&mb, "\"role\": \"system\"");
                    continue;
                }
                if (!json_copy(&mb, &j, key)) { BAD_REQUEST(err, field, "%s: not valid UTF-8", field); goto out; }
                buf_str(&mb, ": ");
                if (val == content && json_type(&j, content) == JSON_ARRAY) {   /* text parts, joined */
                    Buf text = {0};
                    buf_add(&text, "", 0);
                    int part = content + 1;
                    for (int q = 0; q < json_size(&j, content); q++, part = json_next(&j, part)) {
                        int type = json_find(&j, part, "type"), ptext = json_find(&j, part, "text");
                        size_t pl;
                        char *pt = json_str_eq(&j, type, "text") ? json_text(&j, ptext, &pl, &why) : NULL;
                        if (!pt) {
                            buf_free(&text);
                            snprintf(field, sizeof field, "messages[%d].content[%d].%s", e, q,
                                     json_str_eq(&j, type, "text") ? "text" : "type");
                            BAD_REQUEST(err, field, "%s: %s", field, json_str_eq(&j, type, "text") ? why
                                        : "only \"text\" parts are supported");
                            goto out;
                        }
                        if (q) buf_add(&text, "\n", 1);
                        buf_add(&text, pt, pl);
                        free(pt);
                    }
                    buf_json_str(&mb, text.p, text.len);
                    buf_free(&text);
                } else if (val == content && json_type(&j, content) != JSON_STRING) {
                    BAD_REQUEST(err, field, "%s: must be a string or a list of text parts", field);
                    goto out;
                } else if (json_str_eq(&j, key, "tool_calls") && json_type(&j, val) == JSON_ARRAY) {
                    if (!copy_tool_calls(&mb, &j, val)) {
                        snprintf(field, sizeof field, "messages[%d].tool_calls", e);
                        BAD_REQUEST(err, field, "%s: a string in it is not valid UTF-8", field);
                        goto out;
                    }
                } else if (!json_copy(&mb, &j, val)) {
                    BAD_REQUEST(err, field, "%s: not valid UTF-8", field);
                    goto out;
                }
            }
            buf_str(&mb, "}");
        }
        buf_str(&mb, "]");
        if (mb.oom) { buf_free(&mb); SERVER_OOM(err); goto out; }
        r->messages = mb.p;
        r->messages_len = mb.len;
        mb = (Buf){0};
        k = json_find(&j, 0, "tools");
        if (k >= 0 && !json_is_null(&j, k)) {
            if (json_type(&j, k) != JSON_ARRAY) { BAD_REQUEST(err, "tools", "tools: must be an array"); goto out; }
            if (json_size(&j, k) > 0) {   /* as they come: the template renders them */
                Buf tb = {0};
                if (!json_copy(&tb, &j, k) || tb.oom) {
                    buf_free(&tb);
                    BAD_REQUEST(err, "tools", "tools: not valid UTF-8");
                    goto out;
                }
                r->tools = tb.p;
                r->tools_len = tb.len;
            }
        }
        k = json_find(&j, 0, "chat_template_kwargs");
        if (k >= 0 && !json_is_null(&j, k)) {   /* more variables for the template, as vLLM takes them */
            Buf kb = {0};
            if (json_type(&j, k) != JSON_OBJECT || !json_copy(&kb, &j, k) || kb.oom) {
                buf_free(&kb);
                BAD_REQUEST(err, "chat_template_kwargs", "chat_template_kwargs: must be an object");
                goto out;
            }
            r->kwargs = kb.p;
            r->kwargs_len = kb.len;
        }
        int think = json_find(&j, k, "enable_thinking");
        if (think >= 0) {
            if (!json_is_bool(&j, think, &flag)) {
                BAD_REQUEST(err, "chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking: "
                            "must be true or false");
                goto out;
            }
            r->think = flag;
        }
    } else {
        k = json_find(&j, 0, "prompt");
        bool one_in_array = json_type(&j, k) == JSON_ARRAY && json_size(&j, k) == 1;   /* ["text"]: the text */
        if (k >= 0 && one_in_array && json_type(&j, k + 1) == JSON_STRING) k++;
        if (k >= 0 && one_in_array && json_type(&j, k + 1) == JSON_ARRAY) k++;          /* [[ids]]: the ids */
        if (k < 0) { BAD_REQUEST(err, "prompt", "prompt: missing (a string)"); goto out; }
        if (json_type(&j, k) == JSON_ARRAY && json_type(&j, k + 1) == JSON_PRIMITIVE) {   /* token ids */
            int n = json_size(&j, k);
            if (!(r->prompt_ids = malloc((size_t)(n ? n : 1) * sizeof *r->prompt_ids))) { SERVER_OOM(err); goto out; }
            for (int q = 0, t = k + 1; q < n; q++, t = json_next(&j, t)) {
                if (!json_number(&j, t, &v) || v != floor(v) || v < 0 || v > 2147483647.0) {
                    snprintf(field, sizeof field, "prompt[%d]", q);
                    BAD_REQUEST(err, field, "%s: a token id must be a whole number >= 0", field);
                    goto out;
                }
                r->prompt_ids[q] = (int32_t)v;
            }
            r->n_prompt_ids = n;
        } else if (!(r->prompt = json_text(&j, k, &r->prompt_len, &why))) {
            BAD_REQUEST(err, "prompt", "prompt: %s%s", why,
                        json_type(&j, k) == JSON_ARRAY ? " (one prompt per request: no arrays of several)" : "");
            goto out;
        }
    }
    k = json_find(&j, 0, "response_format");
    if (k >= 0 && !json_is_null(&j, k)) {
        int type = json_find(&j, k, "type");
        if (json_str_eq(&j, type, "json_object")) r->format = API_FORMAT_JSON_OBJECT;
        else if (json_str_eq(&j, type, "json_schema")) {   /* the schema as a grammar (json_schema.c) */
            int sch = json_find(&j, json_find(&j, k, "json_schema"), "schema");
            if (json_type(&j, sch) != JSON_OBJECT) {
                BAD_REQUEST(err, "response_format.json_schema.schema", "response_format.json_schema.schema: "
                            "missing (a JSON Schema, an object)");
                goto out;
            }
            char why[300];
            const JsonTok *st = &j.tok[sch];
            r->grammar = json_schema_to_gbnf(j.src + st->start, (size_t)(st->end - st->start), why, sizeof why);
            if (!r->grammar) {
                BAD_REQUEST(err, "response_format.json_schema.schema", "response_format.json_schema.schema: %s",
                            why);
                goto out;
            }
            r->grammar_len = strlen(r->grammar);
            r->format = API_FORMAT_GRAMMAR;
        } else if (!json_str_eq(&j, type, "text")) {
            BAD_REQUEST(err, "response_format", "response_format: type must be \"text\", \"json_object\" or "
                        "\"json_schema\"");
            goto out;
        }
    }
    k = json_find(&j, 0, "grammar");   /* llama-server's: GBNF, compiled when the request starts */
    if (k >= 0 && !json_is_null(&j, k)) {
        if (r->format != API_FORMAT_TEXT || r->grammar) {
            BAD_REQUEST(err, "grammar", "grammar: give it or response_format, not both");
            goto out;
        }
        if (!(r->grammar = json_text(&j, k, &r->grammar_len, &why))) {
            BAD_REQUEST(err, "grammar", "grammar: %s (GBNF, as llama-server takes it)", why);
            goto out;
        }
        r->format = API_FORMAT_GRAMMAR;
    }
    k = json_find(&j, 0, "model");
    if (k >= 0 && !json_is_null(&j, k) && !(r->model_asked = json_text(&j, k, &(size_t){0}, &why))) {
        BAD_REQUEST(err, "model", "model: %s", why);
        goto out;
    }
    /* the limits and the sampling */
    k = json_find(&j, 0, "max_completion_tokens");
    if (k < 0 || json_is_null(&j, k)) k = json_find(&j, 0, "max_tokens");
    if (k >= 0 && !json_is_null(&j, k)) {
        if (!json_number(&j, k, &v) || v != floor(v) || v < 1 || v > 1e9) {
            BAD_REQUEST(err, "max_tokens", "max_tokens: must be a whole number >= 1");
            goto out;
        }
        r->max_tokens = (long)v;
    }
    struct { const char *name; float *dst; double lo, hi; bool lo_open; const char *range; } nums[] = {
        { "temperature", &r->sp.temperature, 0, 2, false, "a number in 0..2" },
        { "top_p", &r->sp.top_p, 0, 1, false, "a number in 0..1" },
        { "min_p", &r->sp.min_p, 0, 1, false, "a number in 0..1" },
        { "repetition_penalty", &r->sp.rep, 0, 1e6, true, "a number > 0" },
        { "frequency_penalty", &r->sp.freq, -2, 2, false, "a number in -2..2" },
        { "presence_penalty", &r->sp.pres, -2, 2, false, "a number in -2..2" },
    };
    for (size_t q = 0; q < sizeof nums / sizeof *nums; q++) {
        k = json_find(&j, 0, nums[q].name);
        if (k < 0 || json_is_null(&j, k)) continue;
        if (!json_number(&j, k, &v) || v < nums[q].lo || v > nums[q].hi || (nums[q].lo_open && v == nums[q].lo)) {
            BAD_REQUEST(err, nums[q].name, "%s: must be %s", nums[q].name, nums[q].range);
            goto out;
        }
        *nums[q].dst = (float)v;
    }
    if (r->sp.top_p == 0) { r->sp.top_p = 1; r->sp.top_k = 1; }   /* an empty nucleus keeps the best token */
    k = json_find(&j, 0, "top_k");
    if (k >= 0 && !json_is_null(&j, k)) {
        if (!json_number(&j, k, &v) || v != floor(v) || v < -1 || v > 1e9) {
            BAD_REQUEST(err, "top_k", "top_k: must be a whole number >= 0 (0 or -1: off)");
            goto out;
        }
        r->sp.top_k = v < 0 ? 0 : (int)v;
    }
    k = json_find(&j, 0, "seed");
    if (k >= 0 && !json_is_null(&j, k)) {
        if (!json_number(&j, k, &v) || v != floor(v) || v < 0 || v > 9007199254740992.0) {
            BAD_REQUEST(err, "seed", "seed: must be a whole number >= 0");
            goto out;
        }
        r->seed = (unsigned long long)v;
        r->has_seed = true;
    }
    k = json_find(&j, 0, "n");
    if (k >= 0 && !json_is_null(&j, k) && (!json_number(&j, k, &v) || v != 1)) {
        BAD_REQUEST(err, "n", "n: only 1 choice per request is supported");
        goto out;
    }
    /* what OpenAI offers and this server does not: refused by name, not ignored */
    k = json_find(&j, 0, "tools");
    if (!chat && k >= 0 && !json_is_null(&j, k)) {
        BAD_REQUEST(err, "tools", "tools: only /v1/chat/completions takes tools");
        goto out;
    }
    k = json_find(&j, 0, "logprobs");
    if (k >= 0 && !json_is_null(&j, k) && !(json_is_bool(&j, k, &flag) && !flag)) {
        BAD_REQUEST(err, "logprobs", "logprobs: not supported");
        goto out;
    }
    struct { const char *name; bool *dst; } bools[] = {
        { "stream", &r->stream }, { "ignore_eos", &r->ignore_eos },
    };
    for (size_t q = 0; q < sizeof bools / sizeof *bools; q++) {
        k = json_find(&j, 0, bools[q].name);
        if (k >= 0 && !json_is_null(&j, k) && !json_is_bool(&j, k, bools[q].dst)) {
            BAD_REQUEST(err, bools[q].name, "%s: must be true or false", bools[q].name);
            goto out;
        }
    }
    k = json_find(&j, json_find(&j, 0, "stream_options"), "include_usage");
    if (k >= 0 && !json_is_null(&j, k) && !json_is_bool(&j, k, &r->include_usage)) {
        BAD_REQUEST(err, "stream_options.include_usage", "stream_options.include_usage: must be true or false");
        goto out;
    }
    k = json_find(&j, 0, "stop");
    if (k >= 0 && !json_is_null(&j, k)) {
        int first = k, count = 1;
        if (json_type(&j, k) == JSON_ARRAY) { first = k + 1; count = json_size(&j, k); }
        if (count > API_MAX_STOP) { BAD_REQUEST(err, "stop", "stop: at most %d strings", API_MAX_STOP); goto out; }
        for (int q = 0, s = first; q < count; q++, s = json_next(&j, s)) {
            size_t len;
            char *t = json_text(&j, s, &len, &why);
            if (!t) { BAD_REQUEST(err, "stop", "stop: %s (a string or an array of strings)", why); goto out; }
            if (!len) { free(t); continue; }    /* an empty stop string matches nothing, as OpenAI's */
            r->stop[r->n_stop] = t;
            r->stop_len[r->n_stop++] = len;
        }
    }
    ok = true;
out:
    json_free(&j);
    buf_free(&mb);
    if (!ok) api_request_free(r);
    return ok;
}

int api_request_ids(const ApiRequest *r, const Tokenizer *tok, const char *system, int ctx, int vocab,
                    int32_t **ids, ApiError *err) {
    *ids = NULL;
    int n;
    if (r->chat) {
        if (!tokenizer_has_chat(tok)) {
            BAD_REQUEST(err, "messages", "this model's tokenizer has no chat template: use /v1/completions");
            return -1;
        }
        if (r->think != TOK_THINK_DEFAULT && !tokenizer_chat_has_thinking(tok)) {
            BAD_REQUEST(err, "chat_template_kwargs.enable_thinking",
                        "chat_template_kwargs.enable_thinking: this model's chat template has no thinking switch");
            return -1;
        }
        Buf with = {0};
        if (!r->has_system && system) {   /* --system: the system message of chats that bring none */
            buf_str(&with, "[{\"role\": \"system\", \"content\": ");
            buf_json_str(&with, system, strlen(system));
            buf_str(&with, r->messages_len > 2 ? "}, " : "}");
            buf_add(&with, r->messages + 1, r->messages_len - 1);
            if (with.oom) { buf_free(&with); SERVER_OOM(err); return -1; }
        }
        ChatRequest cr = {.messages = with.p ? with.p : r->messages,
                          .messages_len = with.p ? with.len : r->messages_len,
                          .tools = r->tools, .tools_len = r->tools_len, .kwargs = r->kwargs,
                          .kwargs_len = r->kwargs_len, .add_generation_prompt = true, .think = r->think};
        size_t tl;
        char why[512];
        char *text = tokenizer_chat_apply(tok, &cr, &tl, why, sizeof why);
        buf_free(&with);
        if (!text && !strcmp(why, "out of memory")) { SERVER_OOM(err); return -1; }
        if (!text) {
            BAD_REQUEST(err, "messages", "messages: the model's chat template refused them: %s", why);
            return -1;
        }
        n = tokenizer_encode(tok, text, tl, false, ids);
        free(text);
    } else if (r->prompt_ids) {   /* as given, as llama-server and vLLM take them */
        n = r->n_prompt_ids;
        if (n == 0) { BAD_REQUEST(err, "prompt", "prompt: no token ids"); return -1; }
        if (!(*ids = malloc((size_t)n * sizeof **ids))) { SERVER_OOM(err); return -1; }
        memcpy(*ids, r->prompt_ids, (size_t)n * sizeof **ids);
        for (int i = 0; i < n; i++)
            if ((*ids)[i] >= vocab) {
                char field[32];
                snprintf(field, sizeof field, "prompt[%d]", i);
                BAD_REQUEST(err, field, "%s: token id %d is outside the vocabulary (0..%d)", field, (*ids)[i],
                            vocab - 1);
                return -1;
            }
    } else {
        n = tokenizer_encode(tok, r->prompt, r->prompt_len, true, ids);
        if (n == 0) {
            BAD_REQUEST(err, "prompt", "prompt: empty, and this model adds no BOS token");
            return -1;
        }
    }
    if (n < 0) { SERVER_OOM(err); return -1; }
    for (int i = 0; i < n; i++)
        if ((*ids)[i] < 0 || (*ids)[i] >= vocab) {
            api_fail(err, 500, "server_error", NULL, NULL, "the tokenizer gave id %d, outside the vocabulary",
                       (*ids)[i]);
            return -1;
        }
    if (n > ctx) {
        api_fail(err, 400, "invalid_request_error", r->chat ? "messages" : "prompt", "context_length_exceeded",
                   "the prompt is %d tokens, longer than the context (%d tokens)", n, ctx);
        return -1;
    }
    return n;
}


/* ---------------------------------------------------------------- replies */
/* "id", "object", "created", "model" of a reply; object: "chat.completion", "chat.completion.chunk",
 * "text_completion" */
static void reply_id(Buf *b, const ApiRequest *r, const char *object) {
    buf_fmt(b, "\"id\":\"%s-%lx%04lx\",\"object\":\"%s\",\"created\":%ld,\"model\":",
            strncmp(object, "chat", 4) ? "cmpl" : "chatcmpl", r->id_base, r->serial, object, r->created);
    buf_json_str(b, r->model, strlen(r->model));
}
static void usage_json(Buf *b, const ApiUsage *u) {
    buf_fmt(b, ",\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%ld,\"total_tokens\":%ld,"
            "\"prompt_tokens_details\":{\"cached_tokens\":%d}}", u->prompt_tokens, u->completion_tokens,
            u->prompt_tokens + u->completion_tokens, u->cached_tokens);
}
/* a streamed reply's event, up to its id */
static void event_open(Buf *b, const ApiRequest *r) {
    buf_str(b, "data: {");
    reply_id(b, r, r->chat ? "chat.completion.chunk" : "text_completion");
}
/* ,"choices":[...] with the one choice: a chat's text as the content of its key ("message" or "delta"; role: after
 * "role":"assistant"; text NULL: an empty delta), a completion's as "text" (NULL: ""); finish: the finish_reason,
 * NULL while streaming */
static void choices_json(Buf *b, const ApiRequest *r, const char *key, bool role, const char *text, size_t n,
                         const char *finish) {
    buf_str(b, ",\"choices\":[{\"index\":0,");
    if (r->chat) {
        buf_fmt(b, "\"%s\":{%s", key, role ? "\"role\":\"assistant\"," : "");
        if (text) { buf_str(b, "\"content\":"); buf_json_str(b, text, n); }
        buf_str(b, "}");
    } else {
        buf_str(b, "\"text\":");
        buf_json_str(b, text ? text : "", n);
    }
    buf_str(b, ",\"logprobs\":null,\"finish_reason\":");
    if (finish) buf_fmt(b, "\"%s\"}]", finish);
    else buf_str(b, "null}]");
}


void api_stream_delta(Buf *b, const ApiRequest *r, bool role, const char *text, size_t n) {
    event_open(b, r);
    choices_json(b, r, "delta", role, text, n, NULL);
    buf_str(b, "}\n\n");
}

void api_stream_end(Buf *b, const ApiRequest *r, const char *finish, const ApiUsage *u) {
    event_open(b, r);
    choices_json(b, r, "delta", false, NULL, 0, finish);
    buf_str(b, "}\n\n");
    if (r->include_usage) {   /* OpenAI's last chunk: no choices, the usage */
        event_open(b, r);
        buf_str(b, ",\"choices\":[]");
        usage_json(b, u);
        buf_str(b, "}\n\n");
    }
    buf_str(b, "data: [DONE]\n\n");
}

void api_reply(Buf *b, const ApiRequest *r, const char *text, size_t n, const char *finish, const ApiUsage *u) {
    buf_str(b, "{");
    reply_id(b, r, r->chat ? "chat.completion" : "text_completion");
    choices_json(b, r, "message", true, text, n, finish);
    usage_json(b, u);
    buf_str(b, "}");
}

void api_models(Buf *b, const char *model, long created, const char *architecture, int ctx, const char *target) {
    buf_str(b, "{\"object\":\"list\",\"data\":[{\"id\":");
    buf_json_str(b, model, strlen(model));
    buf_fmt(b, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"llmcc\",\"meta\":{\"architecture\":",
            created);
    buf_json_str(b, architecture, strlen(architecture));
    buf_fmt(b, ",\"context\":%d,\"target\":", ctx);
    buf_json_str(b, target, strlen(target));
    buf_str(b, "}}]}");
}

/* ---------------------------------------------------------------- llama-server's /tokenize and /detokenize */
/* Optional boolean field name of the object (def where absent or null); false with *err where it is no boolean */
static bool opt_bool(const Json *j, const char *name, bool def, bool *v, ApiError *err) {
    int k = json_find(j, 0, name);
    *v = def;
    if (k < 0 || json_is_null(j, k) || json_is_bool(j, k, v)) return true;
    BAD_REQUEST(err, name, "%s: must be true or false", name);
    return false;
}

bool api_tokenize(Buf *b, const char *body, size_t len, const Tokenizer *tok, ApiError *err) {
    Json j;
    if (!read_object(&j, body, len, err)) return false;
    bool add_special, pieces, ok = false;
    const char *why;
    size_t tl;
    char *text = NULL;
    int32_t *ids = NULL;
    int k = json_find(&j, 0, "content");
    if (k < 0) { BAD_REQUEST(err, "content", "content: missing (the text to tokenize)"); goto out; }
    if (!(text = json_text(&j, k, &tl, &why))) { BAD_REQUEST(err, "content", "content: %s", why); goto out; }
    if (!opt_bool(&j, "add_special", false, &add_special, err) || !opt_bool(&j, "with_pieces", false, &pieces, err))
        goto out;
    int n = tokenizer_encode(tok, text, tl, add_special, &ids);
    if (n < 0) { SERVER_OOM(err); goto out; }
    buf_str(b, "{\"tokens\":[");
    for (int i = 0; i < n; i++) {
        if (!pieces) { buf_fmt(b, "%s%d", i ? "," : "", ids[i]); continue; }
        char *piece = tokenizer_decode(tok, &ids[i], 1, true);   /* a character split across tokens: U+FFFD */
        buf_fmt(b, "%s{\"id\":%d,\"piece\":", i ? "," : "", ids[i]);
        buf_json_str(b, piece ? piece : "", piece ? strlen(piece) : 0);
        buf_str(b, "}");
        free(piece);
    }
    buf_str(b, "]}");
    ok = true;
out:
    free(ids);
    free(text);
    json_free(&j);
    return ok;
}

bool api_detokenize(Buf *b, const char *body, size_t len, const Tokenizer *tok, int vocab, ApiError *err) {
    Json j;
    if (!read_object(&j, body, len, err)) return false;
    bool ok = false;
    int32_t *ids = NULL;
    double v;
    char field[32];
    int k = json_find(&j, 0, "tokens"), n = json_size(&j, k);
    if (json_type(&j, k) != JSON_ARRAY) { BAD_REQUEST(err, "tokens", "tokens: must be an array of ids"); goto out; }
    if (!(ids = malloc((size_t)(n ? n : 1) * sizeof *ids))) { SERVER_OOM(err); goto out; }
    for (int q = 0, t = k + 1; q < n; q++, t = json_next(&j, t)) {
        snprintf(field, sizeof field, "tokens[%d]", q);
        if (!json_number(&j, t, &v) || v != floor(v) || v < 0 || v >= vocab) {
            BAD_REQUEST(err, field, "%s: must be a token id in 0..%d", field, vocab - 1);
            goto out;
        }
        ids[q] = (int32_t)v;
    }
    char *text = tokenizer_decode(tok, ids, n, true);
    if (!text) { SERVER_OOM(err); goto out; }
    buf_str(b, "{\"content\":");
    buf_json_str(b, text, strlen(text));
    buf_str(b, "}");
    free(text);
    ok = true;
out:
    free(ids);
    json_free(&j);
    return ok;
}
