#!/usr/bin/env python3
"""The official `openai` Python client against Switchboard's gateway.

    pip install openai
    python3 examples/openai_client.py [BASE_URL]      (default http://127.0.0.1:8080/v1)

A model is a name from the config's models: section, or pipeline:NAME. The
API key is SB_API_KEY when the config sets runtime.api_key_env, else any
string (the client insists on one).
"""
import os
import sys

from openai import OpenAI

base = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/v1"
client = OpenAI(base_url=base, api_key=os.environ.get("SB_API_KEY", "none"))

print("models:", [m.id for m in client.models.list().data])

reply = client.chat.completions.create(
    model="composer",
    messages=[{"role": "system", "content": "You are a helpful hotline agent. Answer briefly."},
              {"role": "user", "content": "What documents do I need to renew my ID card?"}],
    max_tokens=64, temperature=0)
print("\ncomposer:", reply.choices[0].message.content)
print("usage:", reply.usage)

for question in ["我要查社保缴费记录", "My electricity bill doubled this month"]:
    answer = client.chat.completions.create(model="pipeline:hotline",
                                            messages=[{"role": "user", "content": question}])
    print("\ncaller:  ", question)
    print("hotline: ", answer.choices[0].message.content)
