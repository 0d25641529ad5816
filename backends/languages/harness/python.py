# --- codefleet function harness (python): calls run(input), see backends/languages/harness/README.md ---
def __codefleet_harness(__codefleet_globals):
    # Everything is imported here, not at module level, and builtins are used
    # through the module: the user's code may have rebound json, sys, open,
    # print, type, str, ... as its own names.
    import builtins as B
    import os
    import sys
    import json
    import traceback

    def die(code, msg):
        # One line, after whatever the program already printed.
        msg = B.str(msg).replace("\r", "\\r").replace("\n", "\\n")
        try:
            sys.stdout.flush()
        except B.BaseException:
            pass
        sys.stderr.write("codefleet harness: " + msg + "\n")
        sys.stderr.flush()
        raise B.SystemExit(code)

    def describe(e):
        name = B.type(e).__name__
        try:
            text = B.str(e)
        except B.BaseException:
            text = "<unprintable " + name + ">"
        return name + ": " + text if text else name

    out_path = os.environ.get("CODEFLEET_OUTPUT")
    if not out_path:
        die(4, "CODEFLEET_OUTPUT is not set")
    in_path = os.environ.get("CODEFLEET_INPUT")
    value = None
    if in_path is not None:
        try:
            with B.open(in_path, "r", encoding="utf-8") as f:
                value = json.load(f)
        except B.Exception as e:
            die(4, "cannot read the input " + in_path + ": " + describe(e))

    fn = __codefleet_globals.get("run")
    if fn is None and "run" not in __codefleet_globals:
        die(3, "the code defines no function run(input)")
    if not B.callable(fn):
        die(3, "run is not a function (it is a " + B.type(fn).__name__ + "); define run(input)")

    try:
        result = fn(value)
        import inspect

        if inspect.isawaitable(result):  # async def run(input)
            import asyncio

            async def wait(aw):
                return await aw

            result = asyncio.run(wait(result))
    except B.BaseException as e:
        try:
            sys.stdout.flush()
        except B.BaseException:
            pass
        tb = e.__traceback__
        traceback.print_exception(B.type(e), e, tb.tb_next if tb is not None else None)  # not our frame
        sys.stderr.flush()
        die(1, "run(input) raised " + describe(e))

    try:
        text = json.dumps(result, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        data = text.encode("utf-8")
    except B.Exception as e:
        die(1, "the value run(input) returned is not JSON-serializable: " + describe(e))
    try:
        with B.open(out_path, "wb") as f:
            f.write(data)
    except B.Exception as e:
        try:
            os.unlink(out_path)
        except B.Exception:
            pass
        die(4, "cannot write the output " + out_path + ": " + describe(e))


__codefleet_harness(globals())
