# Sourced by the bench scripts: start_tandem_up BIN_DIR MODEL [FLAGS...]
# starts `tandem up` (with FLAGS) in the background on an ephemeral port,
# waits for its READY line and sets $addr (the gateway), $up_pid and $up_log
# (its stderr, which lists every process with its pid and metrics address).
# The caller's EXIT trap should call stop_tandem_up.
start_tandem_up() {
  up_log=$(mktemp)
  "$1/tandem" up --model "$2" --port 0 "${@:3}" >"$up_log.out" 2>"$up_log" &
  up_pid=$!
  for _ in $(seq 300); do grep -q READY "$up_log.out" 2>/dev/null && break; sleep 0.2; done
  addr=$(sed -n 's/^READY grpc=\([^ ]*\).*/\1/p' "$up_log.out")
  [ -n "$addr" ] || { echo "tandem up did not become ready:" >&2; cat "$up_log" >&2; return 1; }
}

stop_tandem_up() {
  kill "$up_pid" 2>/dev/null
  wait "$up_pid" 2>/dev/null
  rm -f "$up_log" "$up_log.out"
}
