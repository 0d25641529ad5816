#!/usr/bin/env python3
"""`codefleet mcp` driven by the official MCP Python SDK (the `mcp` package
from PyPI), an independent client implementation: it launches the server
over stdio, negotiates the protocol its own way (it probes server/discover
first and falls back to the initialize handshake), lists the tools and
calls them, with a progress callback.  Needs the venv tests/mcp/run.sh makes.
"""
import asyncio
import os
import sys

from mcp import Client
from mcp.client.stdio import StdioServerParameters

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import Fleet  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


async def session(fleet):
    params = StdioServerParameters(command=fleet.cli, args=fleet.globals() + ["mcp"], env=dict(os.environ))
    async with Client(params) as client:
        tools = await client.list_tools()
        names = sorted(t.name for t in tools.tools)
        check("execute_code" in names and "cancel" in names and "read_file" in names, "list_tools: %s" % names)
        r = await client.call_tool("execute_code", {"language": "python", "code": "print(sum(range(10)))"})
        sc = r.structured_content or {}
        check(not r.is_error and sc.get("status") == "success" and sc.get("stdout") == "45\n",
              "execute_code through the SDK: %s" % sc.get("status"))
        check(any("45" in getattr(c, "text", "") for c in r.content), "text content carries the output")
        seen = []

        async def progress(progress, total, message):
            seen.append((progress, message))

        r = await client.call_tool("execute_code", {"language": "shell",
                                                    "code": "for i in 1 2 3; do echo tick $i; sleep 0.3; done"},
                                   progress_callback=progress)
        check((r.structured_content or {}).get("status") == "success", "a streamed run succeeds")
        check(len(seen) >= 2 and "".join(m or "" for _, m in seen) == "tick 1\ntick 2\ntick 3\n",
              "progress callback got the output as it came: %r" % seen)
        r = await client.call_tool("execute_code", {"language": "python", "code": "x", "bogus": 1})
        check(r.is_error, "a bad argument is a tool error")
        if os.environ.get("CF_TEST_REDIS"):
            # A Python session (SPEC.md 3.6): the second cell sees the first's names.
            sid = "%s-nb" % fleet.group
            r = await client.call_tool("execute_code", {"language": "python", "code": "def f(v):\n    return v * 3\nn = 14",
                                                        "session": sid})
            sc = r.structured_content or {}
            check(sc.get("status") == "success" and sc.get("session_cell") == 1, "a session's first cell: %s" % sc)
            r = await client.call_tool("execute_code", {"language": "python", "code": "f(n)", "session": sid})
            sc = r.structured_content or {}
            check(sc.get("stdout") == "42\n" and sc.get("session_restored") is True and sc.get("session_cell") == 2,
                  "the next cell has its names: %s" % sc)
            check(any("restored from its saved state" in getattr(c, "text", "") for c in r.content),
                  "the text says the cell was restored")
            r = await client.call_tool("execute_code", {"language": "python", "session": sid, "code":
                                                        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nn"})
            images = [c for c in r.content if getattr(c, "type", "") == "image"]
            check(len(images) == 1 and getattr(images[0], "mimeType", getattr(images[0], "mime_type", None)) == "image/png" and len(images[0].data) > 1000,
                  "a figure comes back as an image: %s" % [getattr(c, "type", "?") for c in r.content])


def main():
    fleet = Fleet("mcp-sdk").start()
    try:
        asyncio.run(session(fleet))
    except Exception as e:  # the SDK's failure is the test's failure
        check(False, "session raised %r" % (e,))
    finally:
        fleet.stop()
        if failures:
            fleet.dump_log()
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
