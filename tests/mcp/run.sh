#!/usr/bin/env bash
# The MCP server's tests against the test stack (needs CF_TEST_BROKERS and
# friends from deploy/stack.sh env, and CF_BINARY_DIR):
#   run.sh session   a scripted JSON-RPC session (standard library only)
#   run.sh sdk       the official MCP Python SDK as an independent client
#   run.sh ts VERSION  the official MCP TypeScript SDK's client, at VERSION
#                    (1.11.0: the last before 2025-06-18, which asks for
#                    2025-03-26; and a current one)
# The SDKs live outside the clone, installed once per pinned version:
# ${XDG_CACHE_HOME:-~/.cache}/codefleet/mcp-sdk-<version> (a venv) and
# .../mcp-ts-sdk-<version> (npm).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec </dev/null
: "${CF_TEST_BROKERS:?run under the test stack: eval \"\$(deploy/stack.sh env)\"}"
export CF_BINARY_DIR=${CF_BINARY_DIR:-$here/../../build}
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3)

case ${1:-} in
session)
    exec "$py" "$here/session.py"
    ;;
sdk)
    sdk_version=2.3.0 # the SDK under test; a new one is a deliberate change
    venv=${XDG_CACHE_HOME:-$HOME/.cache}/codefleet/mcp-sdk-$sdk_version
    if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c "import mcp" 2>/dev/null; then
        rm -rf "$venv"
        mkdir -p "$(dirname "$venv")"
        "$py" -m venv "$venv.tmp.$$"
        "$venv.tmp.$$/bin/pip" install --quiet --disable-pip-version-check "mcp==$sdk_version"
        mv "$venv.tmp.$$" "$venv"
    fi
    exec "$venv/bin/python" "$here/sdk_client.py"
    ;;
ts)
    ts_version=${2:?run.sh ts VERSION}
    [[ $ts_version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "run.sh ts: VERSION like 1.11.0" >&2; exit 2; }
    dir=${XDG_CACHE_HOME:-$HOME/.cache}/codefleet/mcp-ts-sdk-$ts_version
    if [[ ! -f $dir/node_modules/@modelcontextprotocol/sdk/package.json ]]; then
        command -v npm >/dev/null || { echo "run.sh ts: npm missing (deploy/install.sh installs it)" >&2; exit 1; }
        rm -rf "$dir" "$dir.tmp.$$"
        mkdir -p "$dir.tmp.$$"
        echo '{"private": true, "type": "module"}' >"$dir.tmp.$$/package.json"
        (cd "$dir.tmp.$$" && npm install --silent --no-audit --no-fund "@modelcontextprotocol/sdk@$ts_version") >&2
        mv "$dir.tmp.$$" "$dir"
    fi
    exec "$py" "$here/ts_sdk.py" "$dir"
    ;;
*)
    echo "usage: $0 session|sdk|ts VERSION" >&2
    exit 2
    ;;
esac
