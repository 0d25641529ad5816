# --- codefleet session driver (shell): one cell of a session, see backends/languages/harness/README.md ---
# The worker puts two lines before this file: __codefleet_cell (the cell's
# source, single-quoted) and __codefleet_state (the state file's path in the
# workspace, the working directory).  What persists: the working directory,
# exported variables, plain variables the session set, and functions.  The
# cell runs in this shell (eval), so `cd`, `export` and function
# definitions take effect; its status is the last command's.  A cell that
# fails saves nothing.  Shell sessions need bash (declare, ${!x@}): the
# worker's shell may be a POSIX sh, so this file re-runs itself under bash.
if [ -z "${BASH_VERSION:-}" ]; then
    if command -v bash >/dev/null 2>&1; then
        exec bash "$0" "$@"
    fi
    echo "codefleet session: shell sessions need bash, which this sandbox does not have" >&2
    printf '{"cell": 0, "error": "shell sessions need bash, which this sandbox does not have"}' >"${CODEFLEET_OUTPUT:-/dev/null}"
    exit 3
fi

# A cell costs what its forks cost (about a millisecond each in a sandbox):
# the driver forks nothing on its way (names come from ${!X@}, files are
# read with read and written with redirections).  And the cell may define
# functions named like any command (cd, printf, mv), change IFS or PATH:
# the driver's own steps use builtins and [[ ]], with IFS set locally.

# Every variable name, without a fork: ${!A@} ... ${!_@}.
__cf_names() {
    builtin local IFS=$' \t\n'
    __cf_all=(${!A@} ${!B@} ${!C@} ${!D@} ${!E@} ${!F@} ${!G@} ${!H@} ${!I@} ${!J@} ${!K@} ${!L@} ${!M@}
        ${!N@} ${!O@} ${!P@} ${!Q@} ${!R@} ${!S@} ${!T@} ${!U@} ${!V@} ${!W@} ${!X@} ${!Y@} ${!Z@}
        ${!a@} ${!b@} ${!c@} ${!d@} ${!e@} ${!f@} ${!g@} ${!h@} ${!i@} ${!j@} ${!k@} ${!l@} ${!m@}
        ${!n@} ${!o@} ${!p@} ${!q@} ${!r@} ${!s@} ${!t@} ${!u@} ${!v@} ${!w@} ${!x@} ${!y@} ${!z@} ${!_@})
}

__cf_root=$PWD
__cf_cell=1
__cf_restored=false
# What the shell had before the session's state: only what the session
# changes is saved (not the worker's environment, which differs per run).
declare -A __cf_env0=() __cf_exp0=() # (no user function exists yet: the state is not sourced)
__cf_names
for __cf_n in "${__cf_all[@]}"; do
    __cf_env0[$__cf_n]=1
    [[ ${!__cf_n@a} == *x* ]] && __cf_exp0[$__cf_n]=${!__cf_n}
done
unset __cf_n

if [[ -f $__codefleet_state ]]; then
    __cf_errf=${CODEFLEET_OUTPUT:-/tmp/cf-session}.restore-errors
    if ! builtin source "./$__codefleet_state" 2>"$__cf_errf"; then
        __cf_err=
        IFS= builtin read -r -d '' __cf_err <"$__cf_errf"
        __cf_err=${__cf_err:0:300}
        __cf_msg="its saved state ($__codefleet_state) cannot be restored: ${__cf_err:-it does not source}"
        LC_ALL=C __cf_msg=${__cf_msg//[^ -~]/?} # printable ASCII: the report is JSON
        __cf_msg=${__cf_msg//\\/\\\\}
        __cf_msg=${__cf_msg//\"/\\\"}
        __cf_msg=${__cf_msg//[[:cntrl:]]/ }
        builtin echo "codefleet session: its saved state ($__codefleet_state) cannot be restored" >&2
        [[ -n ${CODEFLEET_OUTPUT:-} ]] &&
            builtin printf '{"cell": 0, "restored": false, "error": "%s"}' "$__cf_msg" >"$CODEFLEET_OUTPUT"
        builtin exit 3
    fi
    __cf_cell=$((${__cf_cells:-0} + 1))
    __cf_restored=true
fi

# Defined after the state is sourced: a state cannot replace them.
__cf_report() { # cell restored extra-json
    [[ -n ${CODEFLEET_OUTPUT:-} ]] || return 0
    builtin printf '{"cell": %s, "restored": %s%s}' "$1" "$2" "$3" >"$CODEFLEET_OUTPUT" 2>/dev/null || builtin true
}

__cf_save() {
    # Locals are named __cf_* too: ${!_@} lists them.
    builtin local IFS=$' \t\n' __cf_d=$PWD __cf_rel __cf_n __cf_sd __cf_real __cf_top
    builtin local __cf_fnf=${CODEFLEET_OUTPUT:-/tmp/cf-session}.functions
    case $__cf_d in
    "$__cf_root") __cf_rel=. ;;
    "$__cf_root"/*) __cf_rel=${__cf_d#"$__cf_root"/} ;;
    *) __cf_rel=$__cf_d ;;
    esac
    __cf_sd=$__cf_root/$__codefleet_state
    __cf_sd=${__cf_sd%/*}
    if [[ ! -d $__cf_sd ]]; then
        builtin command -p mkdir -p "$__cf_sd" || return 1
    fi
    # A state directory the cell made a symlink out of the workspace would
    # be written where the workspace does not keep it.
    builtin cd -P "$__cf_root" && __cf_top=$PWD && builtin cd -P "$__cf_sd" && __cf_real=$PWD || return 1
    builtin cd "$__cf_d" 2>/dev/null || builtin cd "$__cf_root"
    if [[ $__cf_real/ != "$__cf_top"/* ]]; then
        builtin echo "codefleet session: ${__codefleet_state%/*} leads out of the workspace" >&2
        return 1
    fi
    __cf_names
    {
        builtin printf '__cf_cells=%s\n' "$__cf_cell"
        builtin printf '__cf_dir=%q\n' "$__cf_rel"
        for __cf_n in "${__cf_all[@]}"; do
            case $__cf_n in
            __cf_* | __codefleet_* | CODEFLEET_* | BASH* | FUNCNAME | PIPESTATUS | RANDOM | SECONDS | LINENO | \
                SRANDOM | EPOCH* | PWD | OLDPWD | SHLVL | _ | GROUPS | HOSTNAME | HOSTTYPE | MACHTYPE | OSTYPE | \
                PPID | UID | EUID | SHELLOPTS | IFS | OPTIND | OPTERR | DIRSTACK | COMP_* | HISTCMD | PS4 | COLUMNS | LINES)
                continue ;;
            esac
            if [[ -n ${__cf_env0[$__cf_n]+x} ]]; then
                # A name the shell started with: kept when exported and changed.
                [[ -n ${__cf_exp0[$__cf_n]+x} && ${__cf_exp0[$__cf_n]} != "${!__cf_n}" ]] || continue
            fi
            # As declare prints it: the state is sourced at the top level,
            # where declare makes globals.
            builtin declare -p "$__cf_n" 2>/dev/null
        done
        # The session's functions, not the driver's (declare -F's lines,
        # "declare -f NAME", read back from a file: no fork).
        builtin declare -F >"$__cf_fnf"
        while builtin read -r _ _ __cf_n; do
            [[ $__cf_n == __cf_* ]] || builtin declare -f "$__cf_n"
        done <"$__cf_fnf"
    } >|"$__cf_root/$__codefleet_state"
}

__cf_finish() {
    builtin local __cf_rc=$1
    builtin trap - EXIT
    builtin set +euC # the cell's shell options are not the driver's
    if [[ $__cf_rc -eq 0 ]]; then
        if ! __cf_save; then
            builtin echo "codefleet session: the cell ran, but its state could not be saved" >&2
            __cf_report "$__cf_cell" "$__cf_restored" ', "error": "the cell ran, but its state could not be saved"'
            builtin exit 4
        fi
    fi
    __cf_report "$__cf_cell" "$__cf_restored" ""
    builtin exit "$__cf_rc"
}

# The directory the last cell ended in; one inside the workspace is made
# again if it was empty (a workspace keeps files, not directories).
if [[ $__cf_restored == true ]]; then
    case ${__cf_dir-.} in
    .) ;;
    /*)
        builtin cd "$__cf_dir" 2>/dev/null || builtin echo "codefleet session: cannot return to $__cf_dir" >&2
        builtin echo "codefleet session: the working directory $__cf_dir is outside the workspace: files" \
            "written there are not kept" >&2 ;;
    *)
        [[ -d $__cf_root/$__cf_dir ]] || builtin command -p mkdir -p "$__cf_root/$__cf_dir" 2>/dev/null
        builtin cd "$__cf_root/$__cf_dir" 2>/dev/null ||
            builtin echo "codefleet session: cannot return to $__cf_dir" >&2 ;;
    esac
fi

builtin trap '__cf_finish $?' EXIT
__cf_src=$__codefleet_cell
builtin unset __codefleet_cell
builtin eval "$__cf_src"
