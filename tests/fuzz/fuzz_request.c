/* fuzz_request.c: libFuzzer harness for the server's request reading (api_parse_request in runtime/openai.c):
 * the input is a request body, read as /v1/chat/completions' and as /v1/completions'. It must be refused with
 * an error object (a status, a one-line message) or read; a chat's messages, tools and chat_template_kwargs, which
 * go to the chat template as JSON, must then be valid JSON of the right kind. No crash, leak or hang. */
#include "json.h"
#include "openai.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail) {
    fprintf(stderr, "FUZZ CHECK FAILED: %s: %s\n", what, detail);
    abort();
}

/* text[0..n) is one JSON value of the type (re-read with the strict reader) */
static void valid_json(const char *what, const char *text, size_t n, JsonType type) {
    Json j;
    size_t at;
    if (json_read(&j, text, n, &at) != JSON_OK || json_bad_token(&j) >= 0 || json_type(&j, 0) != type)
        fail(what, "not valid JSON of its type");
    for (int t = 0; t < j.ntok; t++) {
        if (json_type(&j, t) != JSON_STRING) continue;
        size_t room = json_string_room(&j, t), len;
        char *s = malloc(room);
        if (json_string(&j, t, s, &len, true, &at) != JSON_OK) fail(what, "a string that is not valid UTF-8");
        free(s);
    }
    json_free(&j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    SampleParams defaults = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .rep = 1.0f};
    for (int chat = 0; chat < 2; chat++) {
        ApiRequest r = {0};
        ApiError e = {0};
        if (!api_parse_request(&r, (const char *)data, size, chat, &defaults, &e)) {
            if ((e.status != 400 && e.status != 500) || !e.message[0] || strchr(e.message, '\n'))
                fail("error object", e.message);
            if (r.messages || r.prompt || r.prompt_ids || r.model_asked || r.tools || r.kwargs)
                fail("a refused request", "holds something");
            continue;
        }
        if (chat) {
            if (!r.messages) fail("chat", "no messages");
            valid_json("messages", r.messages, r.messages_len, JSON_ARRAY);
            if (r.tools) valid_json("tools", r.tools, r.tools_len, JSON_ARRAY);
            if (r.kwargs) valid_json("chat_template_kwargs", r.kwargs, r.kwargs_len, JSON_OBJECT);
        } else if (!r.prompt && !r.prompt_ids) {
            fail("completions", "no prompt");
        }
        for (int i = 0; i < r.n_prompt_ids; i++)
            if (r.prompt_ids[i] < 0) fail("completions", "a negative token id");
        if (!(r.sp.temperature >= 0 && r.sp.temperature <= 2) || r.n_stop > API_MAX_STOP)
            fail("sampling", "out of range");
        api_request_free(&r);
    }
    return 0;
}
