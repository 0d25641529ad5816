# --- codefleet session driver (shell): one cell of a session, see backends/languages/harness/README.md ---
# The worker puts two lines before this file: __codefleet_cell (the cell's
# source, base64) and __codefleet_state (the state file's path in the
# workspace, the working directory).  What persists: the working directory,
# exported variables, plain variables the session set, and functions.  The
# cell runs in this shell (eval), so `cd`, `export` and function
# definitions take effect; its status is the last command's.  A cell that
# fails saves nothing.  Shell sessions need bash (declare, compgen): the
# worker's shell may be a POSIX sh, so this file re-runs itself under bash.
if [ -z "${BASH_VERSION:-}" ]; then
    if command -v bash >/dev/null 2>&1; then
        exec bash "$0" "$@"
    fi
    echo "codefleet session: shell sessions need bash, which this sandbox does not have" >&2
    printf '{"cell": 0, "error": "shell sessions need bash, which this sandbox does not have"}' >"${CODEFLEET_OUTPUT:-/dev/null}"
    exit 3
fi

# The cell may define functions named like any command (cd, printf, mv),
# change IFS or PATH: the driver's own steps use builtins, [[ ]] and
# `command -p` for the few external tools, with IFS set locally.
__cf_report() { # cell restored extra-json
    [[ -n ${CODEFLEET_OUTPUT:-} ]] || return 0
    builtin printf '{"cell": %s, "restored": %s%s}' "$1" "$2" "$3" >"$CODEFLEET_OUTPUT" 2>/dev/null || builtin true
}

__cf_root=$PWD
__cf_cell=1
__cf_restored=false
# What the shell had before the session's state: only what the session
# changes is saved (not the worker's environment, which differs per run).
declare -A __cf_env0=() # (no user function exists yet: the state is not sourced)
for __cf_n in $(builtin compgen -v); do
    __cf_env0[$__cf_n]=1
done
declare -A __cf_exp0=()
for __cf_n in $(builtin compgen -e); do
    __cf_exp0[$__cf_n]=${!__cf_n}
done
builtin unset __cf_n

if [[ -f $__codefleet_state ]]; then
    if ! __cf_err=$( (builtin source "./$__codefleet_state") 2>&1 >/dev/null) ||
        ! builtin source "./$__codefleet_state" 2>/dev/null; then
        __cf_msg="its saved state ($__codefleet_state) cannot be restored: ${__cf_err:-it does not source}"
        __cf_msg=${__cf_msg//\\/\\\\}
        __cf_msg=${__cf_msg//\"/\\\"}
        __cf_msg=${__cf_msg//[[:cntrl:]]/ }
        builtin echo "codefleet session: its saved state ($__codefleet_state) cannot be restored" >&2
        __cf_report 0 false ", \"error\": \"$__cf_msg\""
        builtin exit 3
    fi
    __cf_cell=$((${__cf_cells:-0} + 1))
    __cf_restored=true
    # The directory the last cell ended in; one inside the workspace is
    # made again if it was empty (a workspace keeps files, not directories).
    case ${__cf_dir-.} in
    /*)
        builtin cd "$__cf_dir" 2>/dev/null || builtin echo "codefleet session: cannot return to $__cf_dir" >&2
        builtin echo "codefleet session: the working directory $__cf_dir is outside the workspace: files" \
            "written there are not kept" >&2 ;;
    *)
        builtin command -p mkdir -p "$__cf_root/${__cf_dir-.}" 2>/dev/null
        builtin cd "$__cf_root/${__cf_dir-.}" 2>/dev/null ||
            builtin echo "codefleet session: cannot return to ${__cf_dir-.}" >&2 ;;
    esac
fi

__cf_save() {
    # Locals are named __cf_* too: compgen -v lists them.
    builtin local IFS=$' \t\n' __cf_d=$PWD __cf_rel __cf_out __cf_n __cf_line __cf_sd
    case $__cf_d in
    "$__cf_root") __cf_rel=. ;;
    "$__cf_root"/*) __cf_rel=${__cf_d#"$__cf_root"/} ;;
    *) __cf_rel=$__cf_d ;;
    esac
    __cf_out=$(
        builtin printf '__cf_cells=%s\n' "$__cf_cell"
        builtin printf '__cf_dir=%q\n' "$__cf_rel"
        for __cf_n in $(builtin compgen -v); do
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
            # `declare -g`, so that sourcing it in a function would still
            # make globals: "declare -- x=1" -> "declare -g x=1",
            # "declare -ax a=(...)" -> "declare -gax a=(...)".
            __cf_line=$(builtin declare -p "$__cf_n" 2>/dev/null) || continue
            case $__cf_line in
            "declare -- "*) builtin printf 'declare -g %s\n' "${__cf_line#declare -- }" ;;
            "declare -"*) builtin printf 'declare -g%s\n' "${__cf_line#declare -}" ;;
            esac
        done
        for __cf_n in $(builtin compgen -A function); do
            case $__cf_n in __cf_*) continue ;; esac
            builtin declare -f "$__cf_n"
        done
    )
    __cf_sd=$__cf_root/$__codefleet_state
    __cf_sd=${__cf_sd%/*}
    builtin command -p mkdir -p "$__cf_sd" || return 1
    # A state directory the cell made a symlink out of the workspace would
    # be written where the workspace does not keep it.
    case $(builtin cd "$__cf_sd" && builtin pwd -P)/ in
    "$(builtin cd "$__cf_root" && builtin pwd -P)"/*) ;;
    *) builtin echo "codefleet session: ${__codefleet_state%/*} leads out of the workspace" >&2; return 1 ;;
    esac
    if ! { builtin printf '%s\n' "$__cf_out" >"$__cf_root/$__codefleet_state.tmp" &&
        builtin command -p mv -f "$__cf_root/$__codefleet_state.tmp" "$__cf_root/$__codefleet_state"; }; then
        builtin command -p rm -f "$__cf_root/$__codefleet_state.tmp"
        return 1
    fi
}

__cf_finish() {
    builtin local __cf_rc=$1
    builtin trap - EXIT
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

builtin trap '__cf_finish $?' EXIT
__cf_src=$(builtin printf '%s' "$__codefleet_cell" | builtin command -p base64 -d) || builtin exit 4
builtin unset __codefleet_cell
builtin eval "$__cf_src"
