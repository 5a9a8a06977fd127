/* pipeapi.c - POST /v1/pipelines/NAME, the pipeline API's door.
 *
 *   POST /v1/pipelines/hotline  {"input": "我要查社保缴费记录", "session"?: ID}
 *   -> {"pipeline", "intent", "confidence", "probabilities": {label: p},
 *       "stages": [{name, kind, status, output, json?, error?, ms}],
 *       "output", "reply", "session", "state", "awaiting", "fallback",
 *       "handoff", "done", "usage", "ms"}
 *
 * The body is checked here; the call (cache, run, trace) is pipecall.c's;
 * the reply is written by this door's sink: the result JSON as rendered or
 * as stored, errors as every HTTP door writes them (http_reply.c).
 */
#include <stdio.h>
#include <string.h>

#include "router/router_internal.h"

static void reply_result(void *arg, const rt_answer *a) {
    rt_req *q = arg;
    if (!a->result) rt_req_error(q, 500, "server_error", "out_of_memory", "out of memory");
    else rt_req_json(q, 200, a->result, a->result_len, a->cached ? "hit" : q->cache_key ? "miss" : NULL);
}

void rt_handle_pipeline(rt_req *q, const char *name, const sb_json *body) {
    snprintf(q->model, sizeof q->model, "pipeline:%s", name);
    const sb_json *in = sb_json_get(body, "input");
    if (sb_json_type_of(in) != SB_JSON_STRING) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "'input': expected a string, got %s",
                     in ? sb_json_type_name(sb_json_type_of(in)) : "nothing");
        return;
    }
    if (!sb_json_len(in)) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "'input': must not be empty");
        return;
    }
    const sb_json *until = sb_json_get(body, "until");
    if (until && sb_json_type_of(until) != SB_JSON_STRING) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value", "'until': expected a stage name");
        return;
    }
    const sb_json *session = sb_json_get(body, "session");
    if (session && sb_json_type_of(session) != SB_JSON_STRING && sb_json_type_of(session) != SB_JSON_NULL) {
        rt_req_error(q, 400, "invalid_request_error", "invalid_value",
                     "'session': expected a session id (a string) or null");
        return;
    }
    for (size_t i = 0; i < sb_json_len(body); i++) {
        const char *k = sb_json_key_at(body, i);
        if (strcmp(k, "input") && strcmp(k, "until") && strcmp(k, "session")) {
            rt_req_error(q, 400, "invalid_request_error", "unknown_parameter",
                         "unknown key '%.60s' (expected: input, until, session)", k);
            return;
        }
    }
    q->reply = (rt_sink){ NULL, reply_result, rt_req_fail, q, NULL };
    rt_pipeline_call(q, name, sb_json_str(in), sb_json_str(until), sb_json_str(session));
}
