# --- codefleet session driver (python): one cell of a session, see backends/languages/harness/README.md ---
# The worker puts two lines before this file: __codefleet_cell (the cell's
# source, base64) and __codefleet_state (the state file's path in the
# workspace, which is the working directory).  The cell runs in a namespace
# restored from that file; after a cell that succeeded the namespace is saved
# back there, and the workspace's write-back makes it a revision.  A cell that
# fails saves nothing: the session stays as it was before the cell.
def __codefleet_session(cell_b64, state_path):
    # What every cell needs, and no more: a cell's start is the session's
    # latency (_ast is the compiler's own, ast's imports cost ~7 ms;
    # cloudpickle ~14 ms, loaded only for what pickle cannot save).
    import _ast
    import base64
    import builtins as B
    import json
    import os
    import pickle
    import sys
    import types

    class Saver:
        """pickle, and cloudpickle for what pickle cannot save by reference
        (the session's functions, classes, lambdas)."""

        name = "pickle"

        def dumps(self, obj):
            try:
                return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            except B.Exception:
                try:
                    import cloudpickle
                except B.ImportError:
                    raise
                self.name = "cloudpickle"
                return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    saver = Saver()

    out_path = os.environ.get("CODEFLEET_OUTPUT")
    # Fixed before the cell runs: a cell that changes directory still saves
    # into the workspace.
    root = os.getcwd()
    state_path = os.path.join(root, state_path)
    report = {"cell": 1, "restored": False, "lost": []}

    def write_report():
        if not out_path:
            return
        try:
            with B.open(out_path, "w", encoding="utf-8") as f:
                json.dump(report, f)
        except B.Exception:
            pass

    def flush():
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except B.BaseException:
                pass

    def describe(e):
        name = B.type(e).__name__
        try:
            text = B.str(e)
        except B.BaseException:
            text = ""
        return name + ": " + text if text else name

    def wire_json(v, depth):
        # What the worker's JSON reader takes: int64 integers, string keys
        # (no two alike once written), at most 24 levels.
        if depth > 24:
            return False
        if v is None or B.isinstance(v, (B.bool, B.str, B.float)):
            return True
        if B.isinstance(v, B.int):
            return -(1 << 63) <= v < (1 << 63)
        if B.isinstance(v, (B.list, B.tuple)):
            return B.all(wire_json(x, depth + 1) for x in v)
        if B.isinstance(v, B.dict):
            return B.all(B.type(k) is B.str for k in v) and B.all(wire_json(x, depth + 1) for x in v.values())
        return False

    def figures(report):
        # The figures the cell left open (matplotlib), as Jupyter shows
        # them: PNGs in the result, at most 384 KiB of them (the report,
        # base64 and all, stays under the worker's 1 MiB output cap); then
        # closed.
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        import io

        out, total, dropped = [], 0, 0
        try:
            for num in plt.get_fignums():
                buf = io.BytesIO()
                plt.figure(num).savefig(buf, format="png")
                data = buf.getvalue()
                if total + B.len(data) > 384 * 1024:
                    dropped += 1
                    continue
                total += B.len(data)
                out.append({"path": "figure-%d.png" % num, "png": base64.b64encode(data).decode("ascii")})
            plt.close("all")
        except B.Exception as e:
            sys.stderr.write("codefleet session: a figure could not be drawn: " + describe(e) + "\n")
        report["figures"] = out
        if dropped:
            report["figures_dropped"] = dropped

    # A figure is drawn, not shown on a screen: it comes back as a PNG (set
    # before the restore, which may import pyplot again).
    os.environ.setdefault("MPLBACKEND", "Agg")
    ns = {"__name__": "__main__", "__builtins__": B}
    initial_path = B.list(sys.path)
    lost, why = [], []  # names lost at restore, then at save
    if os.path.exists(state_path):
        try:
            with B.open(state_path, "rb") as f:
                # Two pickles: a small header, then the names.  The
                # directories the session put on sys.path go back first, so
                # that objects pickled by reference to its own modules load.
                header = pickle.load(f)
                sys.path[:0] = [d for d in header.get("sys_path", []) if d not in sys.path]
                saved = header if header.get("v") == 1 else pickle.load(f)  # v1: one pickle
            names = saved.get("names", {})
            # cloudpickle gives the session's functions (and the methods of its
            # classes) one new globals dict of their own: it becomes the
            # namespace, so that they see and set what the cells do.
            module_dicts = {B.id(m.__dict__) for m in B.list(sys.modules.values()) if B.hasattr(m, "__dict__")}
            for value in names.values():
                fns = [value] if B.isinstance(value, types.FunctionType) else (
                    [a for a in B.vars(value).values() if B.isinstance(a, types.FunctionType)]
                    if B.isinstance(value, B.type) else [])
                shared = next((fn.__globals__ for fn in fns if fn.__code__.co_filename == "<cell>" and
                               B.id(fn.__globals__) not in module_dicts), None)
                if shared is not None:
                    shared.update(ns)
                    ns = shared
                    break
            for name, module in saved.get("modules", {}).items():
                try:
                    ns[name] = __import__(module, fromlist=["_"]) if "." in module else __import__(module)
                except B.Exception as e:
                    lost.append(name)
                    why.append("module " + module + " could not be imported again: " + describe(e)[:250])
            ns.update(names)
            report["cell"] = B.int(header.get("cells", 0)) + 1
            report["restored"] = True
        except B.BaseException as e:
            report["cell"] = 0  # no cell of the session ran
            report["error"] = "its saved state (" + state_path + ") cannot be restored: " + describe(e)
            write_report()
            sys.stderr.write("codefleet session: " + report["error"] + "\n")
            flush()
            raise B.SystemExit(3)

    source = base64.b64decode(cell_b64).decode("utf-8", "surrogateescape")
    status = 0
    try:
        tree = B.compile(source, "<cell>", "exec", _ast.PyCF_ONLY_AST)
        last = None
        if tree.body and B.isinstance(tree.body[-1], _ast.Expr):
            last = _ast.Expression(tree.body.pop().value)
        exec(B.compile(tree, "<cell>", "exec"), ns)
        if last is not None:
            value = eval(B.compile(last, "<cell>", "eval"), ns)
            if value is not None:
                ns["_"] = value
                print(B.repr(value))
                try:  # also as the result's output when it has a JSON form
                    if wire_json(value, 0) and B.len(json.dumps(value, allow_nan=False)) <= 65536:
                        report["value"] = value
                except B.Exception:
                    pass
    except B.SystemExit as e:
        status = 0 if e.code is None or e.code == 0 else (e.code if B.isinstance(e.code, B.int) else 1)
        if not B.isinstance(e.code, (B.int, B.type(None))):
            sys.stderr.write(B.str(e.code) + "\n")
    except B.BaseException as e:
        flush()
        tb = e.__traceback__
        import traceback

        traceback.print_exception(B.type(e), e, tb.tb_next if tb is not None else None)  # not our frame
        status = 1
    flush()
    figures(report)
    if status != 0:
        report["error_cell"] = True
        write_report()
        # An exit status is 8 bits: 256 would read as success.
        raise B.SystemExit(status if 0 < status < 256 else 1)

    def state(modules, values):
        return {"modules": modules, "names": values}

    added = [d for d in sys.path if d not in initial_path and B.isinstance(d, B.str)]
    header = pickle.dumps({"v": 2, "cells": report["cell"], "sys_path": added}, protocol=pickle.HIGHEST_PROTOCOL)

    # Save: modules by name, everything else by value in one pickle (so two
    # names of one object stay one object); what cannot be pickled is named.
    modules, values = {}, {}
    for name, value in B.list(ns.items()):
        if name.startswith("__") and name.endswith("__"):
            continue
        if B.isinstance(value, types.ModuleType) and sys.modules.get(value.__name__) is value:
            modules[name] = value.__name__  # imported again by name
        else:
            values[name] = value
    try:
        blob = saver.dumps(state(modules, values))
    except B.BaseException:
        for name in B.sorted(values):
            try:
                saver.dumps(values[name])
            except B.BaseException as e:
                lost.append(name)
                why.append(describe(e)[:300])
                del values[name]
        try:
            blob = saver.dumps(state(modules, values))
        except B.BaseException as e:
            lost += B.sorted(values)
            why += [describe(e)[:300]] * B.len(values)
            blob = saver.dumps(state(modules, {}))
    # The report stays small whatever the cell left (the worker drops an
    # output file over its cap, and with it the report).
    report["lost"] = [n[:100] for n in lost[:256]]
    report["lost_why"] = [w[:200] for w in why[:256]]
    report["lost_more"] = B.max(0, B.len(lost) - 256)
    try:
        pickle.loads(blob)  # what the next cell will do: fail here, not there
        blob = header + blob
        d = os.path.dirname(state_path)
        real_root = os.path.realpath(root)
        if os.path.commonpath([os.path.realpath(d), real_root]) != real_root:
            raise B.OSError(os.path.dirname(os.path.relpath(state_path, root)) + " leads out of the workspace")
        os.makedirs(d, exist_ok=True)
        tmp = state_path + ".tmp"
        with B.open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, state_path)
    except B.BaseException as e:
        report["error"] = "the cell ran, but its state could not be saved: " + describe(e)[:300]
        write_report()
        sys.stderr.write("codefleet session: " + report["error"] + "\n")
        flush()
        raise B.SystemExit(4)
    report["state_bytes"] = B.len(blob)
    report["saver"] = saver.name
    write_report()


__codefleet_session(__codefleet_cell, __codefleet_state)
