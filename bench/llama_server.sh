# shellcheck shell=bash
# Sourced by the bench scripts: start_llama_server LLAMA_BIN_DIR MODEL PORT LOG [FLAGS...]
# starts llama-server on MODEL with 2 threads (-t 2 -tb 2), a 4096-token
# context and FLAGS, listening on 127.0.0.1:PORT with its output in LOG, and
# waits for /health; sets $llama_pid. Fails, with LOG on stderr, when it does
# not become ready. The caller's EXIT trap should kill $llama_pid.
start_llama_server() {
  local port="$3" log="$4"
  "$1/llama-server" -m "$2" -t 2 -tb 2 -c 4096 --port "$port" "${@:5}" >"$log" 2>&1 &
  # shellcheck disable=SC2034  # read by the caller
  llama_pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  cat "$log" >&2
  echo "llama-server did not become ready" >&2
  return 1
}
