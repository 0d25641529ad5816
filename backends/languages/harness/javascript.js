// --- codefleet function harness (javascript): calls run(input), see backends/languages/harness/README.md ---
// The leading ';' ends the user's last statement if it had none.  The harness
// adds no name to the module: everything is inside one function expression.
;(async function __codefleet_harness(__codefleet_run) {
  const __codefleet_g = globalThis;
  const __codefleet_process = __codefleet_g.process;
  const __codefleet_JSON = __codefleet_g.JSON;
  // require is absent when node took the file for an ES module (import syntax).
  const __codefleet_mod = (name) =>
    typeof __codefleet_process.getBuiltinModule === 'function'
      ? __codefleet_process.getBuiltinModule(name)
      : require(name);
  const __codefleet_fs = __codefleet_mod('fs');
  const __codefleet_util = __codefleet_mod('util');

  const __codefleet_die = (code, msg) => {
    msg = String(msg).replace(/\r/g, '\\r').replace(/\n/g, '\\n');
    __codefleet_process.stderr.write('codefleet harness: ' + msg + '\n');
    __codefleet_process.exit(code);
  };
  const __codefleet_describe = (e) => {
    if (e instanceof Error || (e !== null && typeof e === 'object' && typeof e.stack === 'string')) {
      const name = (e.constructor && e.constructor.name) || e.name || 'Error';
      return e.message ? name + ': ' + e.message : String(name);
    }
    let text;
    try {
      text = typeof e === 'string' ? e : __codefleet_util.inspect(e);
    } catch (_) {
      text = '<unprintable>';
    }
    return (e === null ? 'null' : typeof e) + ': ' + text;
  };

  const __codefleet_out = __codefleet_process.env.CODEFLEET_OUTPUT;
  if (!__codefleet_out) __codefleet_die(4, 'CODEFLEET_OUTPUT is not set');
  const __codefleet_in = __codefleet_process.env.CODEFLEET_INPUT;
  let __codefleet_input = null;
  if (__codefleet_in !== undefined) {
    try {
      __codefleet_input = __codefleet_JSON.parse(__codefleet_fs.readFileSync(__codefleet_in, 'utf8'));
    } catch (e) {
      __codefleet_die(4, 'cannot read the input ' + __codefleet_in + ': ' + __codefleet_describe(e));
    }
  }

  if (__codefleet_run === undefined) __codefleet_die(3, 'the code defines no function run(input)');
  if (typeof __codefleet_run !== 'function')
    __codefleet_die(3, 'run is not a function (it is ' + (__codefleet_run === null ? 'null' : 'a ' + typeof __codefleet_run) + '); define run(input)');

  let __codefleet_result;
  try {
    __codefleet_result = await __codefleet_run(__codefleet_input);
  } catch (e) {
    let shown;
    try {
      shown = e !== null && typeof e === 'object' && typeof e.stack === 'string' ? e.stack : __codefleet_util.inspect(e);
    } catch (_) {
      shown = '<unprintable>';
    }
    __codefleet_process.stderr.write(shown + '\n');
    __codefleet_die(1, 'run(input) raised ' + __codefleet_describe(e));
  }

  let __codefleet_text;
  try {
    __codefleet_text = __codefleet_result === undefined ? 'null' : __codefleet_JSON.stringify(__codefleet_result);
  } catch (e) {
    __codefleet_die(1, 'the value run(input) returned is not JSON-serializable: ' + __codefleet_describe(e));
  }
  if (typeof __codefleet_text !== 'string') // a function or a symbol
    __codefleet_die(1, 'the value run(input) returned is not JSON-serializable: a ' + typeof __codefleet_result);
  try {
    __codefleet_fs.writeFileSync(__codefleet_out, __codefleet_text);
  } catch (e) {
    try { __codefleet_fs.unlinkSync(__codefleet_out); } catch (_) {}
    __codefleet_die(4, 'cannot write the output ' + __codefleet_out + ': ' + __codefleet_describe(e));
  }
  // The result is written: timers or sockets the code left open do not keep
  // the program running.
  __codefleet_process.exit(0);
})(
  typeof run !== 'undefined' ? run
    : typeof module !== 'undefined' && module && module.exports && typeof module.exports.run !== 'undefined' ? module.exports.run
    : undefined
).catch((e) => {
  // Only a bug of the harness itself gets here.
  globalThis.process.stderr.write('codefleet harness: internal error: ' + String(e && e.stack || e).replace(/\n/g, '\\n') + '\n');
  globalThis.process.exit(4);
});
