#!/usr/bin/env bash
# SCIM 2.0 compliance check (issue 14 item 1) with scim2-tester through scim2-cli (pinned), not
# part of npm test: it installs from PyPI into the git-ignored .venv-scim on first use.
#
#   test/scim/compliance.sh                  starts its own stack (fresh DATA_DIR, free ports),
#                                            reads the demo SCIM credential from demo.json, checks
#                                            http://127.0.0.1:<port>/scim/v2, stops the stack
#   SCIM_URL=... SCIM_TOKEN=... test/scim/compliance.sh   checks a running stack instead
#
# Extra arguments go to `scim2 test` (e.g. -v for every check). The token travels in
# SCIM_CLI_HEADERS, never on a command line other users of the machine could read.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=.venv-scim
if [ ! -x "$venv/bin/scim2" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q scim2-cli==0.6.0 scim2-tester==0.5.2
fi

pid=""
data=""
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$data" ]; then rm -rf "$data"; fi
}
trap cleanup EXIT

if [ -z "${SCIM_URL:-}" ]; then
  free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
  gw=$(free_port); core=$(free_port); authz=$(free_port)
  data=$(mktemp -d)
  GATEWAY_PORT=$gw CORE_PORT=$core AUTHZ_PORT=$authz DATA_DIR="$data" LOG_LEVEL=warn \
    node --import tsx bin/start.ts >"$data/stack.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do
    if grep -q 'payments platform is up' "$data/stack.log" 2>/dev/null; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then cat "$data/stack.log"; exit 1; fi
    sleep 0.5
  done
  grep -q 'payments platform is up' "$data/stack.log" || { echo "the stack did not come up"; cat "$data/stack.log"; exit 1; }
  SCIM_URL="http://127.0.0.1:$gw/scim/v2"
  SCIM_TOKEN=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["scim"]["token"])' "$data/demo.json")
fi

export SCIM_CLI_HEADERS="Authorization: Bearer $SCIM_TOKEN"
"$venv/bin/scim2" --url "$SCIM_URL" test "$@"
