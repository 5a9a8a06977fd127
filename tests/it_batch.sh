#!/usr/bin/env bash
# Continuous batching in a real worker process (docs/BATCHING.md): the same
# fixture behind `switchboard worker --parallel 1` (the reference, one
# request at a time) and `--parallel 4 --max-queue 4`, driven over their
# Unix sockets by tests/batch_client.py: 8 concurrent requests sharing a
# system prompt each get their answer alone, health answers during the
# burst, the prefix cache hits, scoring agrees, a burst past parallel +
# max_queue gets 'busy'; a third worker with a one-context pool keeps a
# generation that does not fit queued and still takes a score request. Set SB_BIN to test another binary.
set -u
cd "$(dirname "$0")/.."
. tests/itlib.sh
it_init batch
model=$DATA/tiny-llama-spm-Q4_K_M.gguf
"$SB" worker --name ref --model "$model" --socket "$tmp/ref.sock" -t 1 -c 512 --parallel 1 \
    > "$tmp/ref.log" 2>&1 &
ref=$!; it_pids+=($ref)
"$SB" worker --name batch --model "$model" --socket "$tmp/batch.sock" -t 1 -c 512 --parallel 4 --max-queue 4 \
    > "$tmp/batch.log" 2>&1 &
batch=$!; it_pids+=($batch)
# A pool of one context (2 MiB = 4096 positions of this fixture): one
# 3000-token generation reserves most of it.
"$SB" worker --name tight --model "$model" --socket "$tmp/tight.sock" -t 1 -c 4096 --parallel 4 --kv-mb 2 \
    > "$tmp/tight.log" 2>&1 &
tight=$!; it_pids+=($tight)
PYTHONPATH=tests python3 tests/batch_client.py "$tmp/ref.sock" "$tmp/batch.sock" "$tmp/tight.sock"
rc=$?
if [ $rc -ne 0 ]; then echo "--- batch.log (tail)"; tail -20 "$tmp/batch.log"; fi
it_stop "$batch" "batched worker" || rc=1
it_stop "$tight" "small-pool worker" || rc=1
it_stop "$ref" "reference worker" || rc=1
it_san_check "$tmp/batch.log" "the batched worker's log" || rc=1
it_san_check "$tmp/ref.log" "the reference worker's log" || rc=1
it_san_check "$tmp/tight.log" "the small-pool worker's log" || rc=1
exit $rc
