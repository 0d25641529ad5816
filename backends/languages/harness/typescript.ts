// --- codefleet function harness (typescript): calls run(input), see backends/languages/harness/README.md ---
// The leading ';' ends the user's last statement if it had none.  The harness
// adds no name to the program: everything is inside one function expression,
// and it never names run in TypeScript, so it compiles (tsc --strict) whatever
// type run has, or when the code defines none: the direct eval below looks run
// up at run time in the compiled module's scope.
;(async function __codefleet_harness(__codefleet_run: any): Promise<void> {
  const __codefleet_g: any = globalThis;
  const __codefleet_process: any = __codefleet_g.process;
  const __codefleet_JSON: any = __codefleet_g.JSON;
  const __codefleet_mod = (name: string): any =>
    typeof __codefleet_process.getBuiltinModule === 'function'
      ? __codefleet_process.getBuiltinModule(name)
      : require(name);
  const __codefleet_fs: any = __codefleet_mod('fs');
  const __codefleet_util: any = __codefleet_mod('util');

  const __codefleet_die = (code: number, msg: unknown): never => {
    const line = String(msg).replace(/\r/g, '\\r').replace(/\n/g, '\\n');
    __codefleet_process.stderr.write('codefleet harness: ' + line + '\n');
    return __codefleet_process.exit(code) as never;
  };
  const __codefleet_describe = (e: any): string => {
    if (e instanceof Error || (e !== null && typeof e === 'object' && typeof e.stack === 'string')) {
      const name = (e.constructor && e.constructor.name) || e.name || 'Error';
      return e.message ? name + ': ' + e.message : String(name);
    }
    let text: string;
    try {
      text = typeof e === 'string' ? e : __codefleet_util.inspect(e);
    } catch (_) {
      text = '<unprintable>';
    }
    return (e === null ? 'null' : typeof e) + ': ' + text;
  };

  const __codefleet_out: string | undefined = __codefleet_process.env.CODEFLEET_OUTPUT;
  if (!__codefleet_out) return __codefleet_die(4, 'CODEFLEET_OUTPUT is not set');
  const __codefleet_in: string | undefined = __codefleet_process.env.CODEFLEET_INPUT;
  let __codefleet_input: any = null;
  if (__codefleet_in !== undefined) {
    try {
      __codefleet_input = __codefleet_JSON.parse(__codefleet_fs.readFileSync(__codefleet_in, 'utf8'));
    } catch (e: any) {
      __codefleet_die(4, 'cannot read the input ' + __codefleet_in + ': ' + __codefleet_describe(e));
    }
  }

  if (__codefleet_run === undefined) __codefleet_die(3, 'the code defines no function run(input)');
  if (typeof __codefleet_run !== 'function')
    __codefleet_die(3, 'run is not a function (it is ' + (__codefleet_run === null ? 'null' : 'a ' + typeof __codefleet_run) + '); define run(input)');

  let __codefleet_result: any;
  try {
    __codefleet_result = await __codefleet_run(__codefleet_input);
  } catch (e: any) {
    let shown: string;
    try {
      shown = e !== null && typeof e === 'object' && typeof e.stack === 'string' ? e.stack : __codefleet_util.inspect(e);
    } catch (_) {
      shown = '<unprintable>';
    }
    __codefleet_process.stderr.write(shown + '\n');
    __codefleet_die(1, 'run(input) raised ' + __codefleet_describe(e));
  }

  let __codefleet_text: unknown;
  try {
    __codefleet_text = __codefleet_result === undefined ? 'null' : __codefleet_JSON.stringify(__codefleet_result);
  } catch (e: any) {
    __codefleet_die(1, 'the value run(input) returned is not JSON-serializable: ' + __codefleet_describe(e));
  }
  if (typeof __codefleet_text !== 'string') // a function or a symbol
    return __codefleet_die(1, 'the value run(input) returned is not JSON-serializable: a ' + typeof __codefleet_result);
  try {
    __codefleet_fs.writeFileSync(__codefleet_out, __codefleet_text);
  } catch (e: any) {
    try { __codefleet_fs.unlinkSync(__codefleet_out); } catch (_) {}
    __codefleet_die(4, 'cannot write the output ' + __codefleet_out + ': ' + __codefleet_describe(e));
  }
  // The result is written: timers or sockets the code left open do not keep
  // the program running.
  __codefleet_process.exit(0);
})(
  eval("typeof run !== 'undefined' ? run : typeof module !== 'undefined' && module && module.exports ? module.exports.run : undefined")
).catch((e: any) => {
  // Only a bug of the harness itself gets here.
  const p: any = (globalThis as any).process;
  p.stderr.write('codefleet harness: internal error: ' + String((e && e.stack) || e).replace(/\n/g, '\\n') + '\n');
  p.exit(4);
});
