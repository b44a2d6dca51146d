#!/bin/sh
# Plain curl against tapeproxy: one chat completion, then the same question streamed.
#   tapeproxy serve --cassette examples/curl                  # replays the committed cassette
#   OPENAI_BASE_URL=http://127.0.0.1:8787/openai/v1 sh examples/curl/chat.sh
# In replay any key works; tapeproxy never writes the one you send.
set -eu
base="${OPENAI_BASE_URL:-http://127.0.0.1:8787/openai/v1}"
key="${OPENAI_API_KEY:-sk-replay}"
question='{"role": "user", "content": "What is the capital of France?"}'

curl --silent --show-error --fail-with-body "$base/chat/completions" \
    -H "authorization: Bearer $key" -H "content-type: application/json" \
    -d "{\"model\": \"gpt-4o-mini\", \"messages\": [$question]}"
echo
curl --silent --show-error --fail-with-body --no-buffer "$base/chat/completions" \
    -H "authorization: Bearer $key" -H "content-type: application/json" \
    -d "{\"model\": \"gpt-4o-mini\", \"stream\": true, \"messages\": [$question]}"
