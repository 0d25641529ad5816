#!/usr/bin/env python3
"""The MCP TypeScript SDK's client (tests/mcp/ts_client.mjs, run by node from
the directory tests/mcp/run.sh installed that SDK version into) against a
fleet of its own on the test stack.  Usage: ts_sdk.py SDK_DIR."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import Fleet  # noqa: E402


def main():
    sdk_dir = sys.argv[1]
    # ESM resolves packages from the script's own directory upwards.
    script = os.path.join(sdk_dir, "ts_client.mjs")
    shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts_client.mjs"), script)
    fleet = Fleet("mcp-ts").start()
    try:
        rc = subprocess.run(["node", script, fleet.cli] + fleet.globals(), timeout=600).returncode
    finally:
        fleet.stop()
    if rc:
        fleet.dump_log()
    return rc


if __name__ == "__main__":
    sys.exit(main())
