#!/usr/bin/env bash
# check_real.sh - `make check-real`: OpenAI tool calling and logprobs on a
# real model, Qwen2.5-Coder-0.5B-Instruct Q4_K_M (`make models`), where the
# fixtures of `make check` have random weights. Not part of `make check`:
# it takes minutes and a 400 MB model.
#
#   1. tests/real/tools_real.py through a `switchboard run` with the model as
#      a local worker: 100 tool_choice "required" calls over varied and
#      adversarial prompts and three function schemas, every one parsed and
#      validated with jsonschema; then a langchain-openai agent loop
#      (ChatOpenAI(base_url=...).bind_tools) that calls a Python function
#      and must use its result in the final answer, on
#      Qwen2.5-Coder-1.5B-Instruct Q4_K_M (`tools/models.sh qwen15`): the
#      smallest model that does it, the 0.5B repeats its call as text
#      instead of answering (docs/router.md).
#   2. tests/logprobs_check.py on a worker with --parallel 1 (the
#      single-sequence path): a greedy generation's logprobs equal
#      `switchboard logits` for the same prefixes within 1e-4; on a CPU
#      with AVX-512 a second time with the AVX2 kernels (it_kernel_levels).
#
# SB_REAL_MODEL names another GGUF of a Qwen2.5 instruct model for 1 and 2,
# SB_AGENT_MODEL another for the agent loop. Exit 0 when all pass, 1 when
# one fails, 2 when a model is missing (without the agent's model the rest
# still runs).
set -u
cd "$(dirname "$0")/../.."
. tests/itlib.sh
it_init check-real
model=$(realpath "${SB_REAL_MODEL:-models/qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf}" 2>/dev/null)
[ -f "$model" ] || { echo "check-real: ${SB_REAL_MODEL:-models/qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf} missing (make models)"; exit 2; }
agent_gguf=${SB_AGENT_MODEL:-models/qwen2.5-coder-1.5b-instruct.Q4_K_M.gguf}
agent=$(realpath "$agent_gguf" 2>/dev/null)
read -r hport < <(it_ports 1)
cat > "$tmp/c.yaml" <<YAML
runtime: { dir: $tmp/run, http: 127.0.0.1:$hport, drain_ms: 2000 }
models:
  coder: { gguf: $model, threads: 2, ctx: 2048, max_tokens: 512 }
YAML
if [ -f "$agent" ]; then
    echo "  agent: { gguf: $agent, threads: 2, ctx: 2048, max_tokens: 512 }" >> "$tmp/c.yaml"
    agent_name=agent
else
    echo "check-real: $agent_gguf missing (tools/models.sh qwen15): no agent loop"
    agent_name=none
fi
"$SB" run -c "$tmp/c.yaml" > "$tmp/run.log" 2>&1 & it_pids+=($!)
it_wait_http "http://127.0.0.1:$hport/health" 200 ||
    { echo "check-real: FAIL the runtime did not come up"; tail "$tmp/run.log"; exit 1; }
rc=0
python3 tests/real/tools_real.py "http://127.0.0.1:$hport/v1" coder "$agent_name" || rc=1
it_stop "${it_pids[-1]}" "runtime" || rc=1

for level in $(it_kernel_levels); do
    run=(env)   # the default level: whatever the environment asks for
    [ "$level" = default ] || run=(env SB_KERNELS="$level")
    sock="$tmp/w-$level.sock"
    "${run[@]}" "$SB" worker --model "$model" --socket "$sock" -t 2 --parallel 1 > "$tmp/w-$level.log" 2>&1 & it_pids+=($!)
    for _ in $(seq 1 600); do [ -S "$sock" ] && break; sleep 0.1; done
    echo "# logprobs, kernels: $level"
    (cd tests && "${run[@]}" python3 logprobs_check.py "$SB" "$model" "$sock") || rc=1
    it_stop "${it_pids[-1]}" "worker" || rc=1
done
[ $rc -eq 0 ] && [ "$agent_name" = none ] && rc=2
case $rc in
    0) echo "check-real: ok" ;;
    2) echo "check-real: incomplete (the agent loop's model is missing)" ;;
    *) echo "check-real: FAIL" ;;
esac
exit $rc
