#!/usr/bin/env bash
# The OpenAI-compatible HTTP front with curl, as a shell script would use it:
# /v1/models, a completion, a streamed chat (server-sent events ending in
# [DONE]), the x-request-id header echoed, and errors in OpenAI's shape with
# the matching HTTP status (400 naming the parameter, 404, 413).
# Usage: curl_test.sh TANDEM_BIN MODEL
set -euo pipefail
bin="$1"
model="$2"
work="$(mktemp -d)"
"$bin" up --model "$model" --port 0 --http-port 0 >"$work/ready" 2>"$work/log" &
up=$!
cleanup() {
  kill -TERM "$up" 2>/dev/null || true
  wait "$up" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 600); do
  grep -q '^READY' "$work/ready" 2>/dev/null && break
  kill -0 "$up" 2>/dev/null || { cat "$work/log"; echo "tandem up exited"; exit 1; }
  sleep 0.1
done
http="$(grep -o 'http=[^ ]*' "$work/ready" | cut -d= -f2)"
[ -n "$http" ] || { echo "no http= in the READY line"; exit 1; }
base="http://$http/v1"
failures=0
passes=0
check() {  # check NAME PYTHON-EXPRESSION-OVER-`body`-AND-`status` FILE STATUS
  if python3 - "$3" "$4" <<PY
import json, sys
body = open(sys.argv[1]).read()
status = int(sys.argv[2])
ok = $2
sys.exit(0 if ok else 1)
PY
  then echo "ok   $1"; passes=$((passes + 1)); else echo "FAIL $1"; cat "$3"; echo; failures=$((failures + 1)); fi
}
req() {  # req OUT [curl args...]: writes the body to OUT, prints the status
  local out="$1"; shift
  curl -sS -o "$out" -w '%{http_code}' "$@"
}

s=$(req "$work/models" "$base/models")
check models 'status == 200 and json.loads(body)["data"][0]["id"] == "stories260K"' \
  "$work/models" "$s"

s=$(req "$work/cmpl" -H 'content-type: application/json' -H 'x-request-id: curl-1' \
  -D "$work/headers" "$base/completions" \
  -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}')
check completion 'status == 200 and json.loads(body)["choices"][0]["text"] == ", there was a little girl" and json.loads(body)["id"] == "cmpl-curl-1"' \
  "$work/cmpl" "$s"
check request-id-header '"x-request-id: curl-1" in body.lower()' "$work/headers" 200

s=$(req "$work/sse" -N "$base/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "stream": true}')
check sse 'status == 200 and body.rstrip().endswith("data: [DONE]") and all(json.loads(e[6:])["object"] == "chat.completion.chunk" for e in body.strip().split("\n\n")[:-1])' \
  "$work/sse" "$s"

s=$(req "$work/bad" "$base/completions" -d '{"prompt": "x", "presence_penalty": 9}')
check bad-param 'status == 400 and json.loads(body)["error"]["param"] == "presence_penalty" and json.loads(body)["error"]["type"] == "invalid_request_error"' \
  "$work/bad" "$s"
s=$(req "$work/badjson" "$base/chat/completions" -d '{"messages": [')
check bad-json 'status == 400 and json.loads(body)["error"]["param"] == "body"' "$work/badjson" "$s"
s=$(req "$work/nf" "$base/nothing")
check not-found 'status == 404 and "error" in json.loads(body)' "$work/nf" "$s"
head -c 9000000 /dev/zero | tr '\0' 'a' >"$work/big"
s=$(req "$work/big_out" "$base/completions" --data-binary "@$work/big")
check too-large 'status == 413' "$work/big_out" "$s"

echo "$passes passed, $failures failed"
[ "$failures" -eq 0 ]
