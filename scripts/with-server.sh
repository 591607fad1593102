#!/usr/bin/env bash
# Run a command beside a server that lives exactly as long as the command: 004's launcher in a served layout
# (composer.costs.power prices them; the live profile's cheapest is colocated, so it does not use this), where each job (on
# a SLURM node of its own, or one after another on one machine) starts its own vLLM server on GPUs of its own,
# trains or evaluates on the others, and stops the server when it ends.
#   scripts/with-server.sh SERVER_COMMAND HEALTH_URL COMMAND [ARGS...]
#   scripts/with-server.sh "CUDA_VISIBLE_DEVICES=7 python -m composer.vllm_server --model Qwen/Qwen3-8B" http://127.0.0.1:8000/health/ \
#     env CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6 accelerate launch --num_processes 7 ...
# Waits up to COMPOSER_SERVER_WAIT_S seconds (default 1800: an 8B model's first load) for HEALTH_URL to answer, then
# runs COMMAND and exits with its status. Exits 3, with the end of the server's log, if the server exits or never
# answers. The server runs in its own process group, stopped (TERM, then KILL) however this script ends.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 SERVER_COMMAND HEALTH_URL COMMAND [ARGS...]" >&2
  exit 2
fi
server="$1" url="$2"
shift 2
log="$(mktemp -t composer-server.XXXXXX.log)"
setsid bash -c "$server" >"$log" 2>&1 &
pid=$!
stop() {
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$log"
}
trap stop EXIT
trap 'exit 130' INT TERM
deadline=$((SECONDS + ${COMPOSER_SERVER_WAIT_S:-1800}))
until python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)" "$url" 2>/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
    why="exited"; kill -0 "$pid" 2>/dev/null && why="did not answer $url within ${COMPOSER_SERVER_WAIT_S:-1800} s"
    echo "with-server.sh: the server ($server) $why; the end of its log:" >&2
    tail -n 40 "$log" >&2
    exit 3
  fi
  sleep 1
done
status=0
"$@" || status=$?
exit "$status"
