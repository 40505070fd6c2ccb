# Sourced by the install-*.sh scripts: the check of a path given to override an install.
#
# print_executable SCRIPT PATH [WHAT]: prints PATH when it is an executable file; otherwise
# says so on stderr as SCRIPT (naming WHAT, PATH unless given) and exits 1.

print_executable() {
    local script="$1" path="$2" what="${3:-$2}"
    if [[ -x "$path" ]]; then
        echo "$path"
        return 0
    fi
    echo "$script: $what is not an executable file" >&2
    exit 1
}
