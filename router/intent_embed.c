/* intent_embed.c - intent stages that classify by sentence embeddings. */
#include "router_internal.h"

void rt_intent_models_changed(rt *r) { (void)r; }
