/* chat_impl.h - what chat.c shares with chat_tools.c inside the engine. */
#ifndef SB_CHAT_IMPL_H
#define SB_CHAT_IMPL_H

#include "worker/engine/sb_chat.h"

/* A message's content (its text or its parts, each trusted as it says),
 * trimmed of C-locale whitespace at both ends when trim. */
void chat_put_content(sb_prompt *b, const sb_chat_msg *m, int trim);
/* 1 when r can be written into a template's text: 1-32 of A-Z a-z 0-9 _ -. */
int chat_valid_role(const char *r);
/* One past the JSON value that starts at p (strings, nesting and scalars
 * followed; no validation): where a value in text ends. */
const char *chat_json_skip(const char *p, const char *end);

#endif
