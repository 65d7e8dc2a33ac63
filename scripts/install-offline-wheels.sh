#!/usr/bin/env bash
# Installs a folder of wheels (from `make gpu-wheels`) on a host without network:
#
#   scripts/install-offline-wheels.sh WHEELS_DIR TARGET_DIR
#
# - Wheels cut into parts (NAME.whl.part-aa, -ab, ... by `make gpu-wheels-split`) are joined first, into a scratch
#   folder (WHEELS_DIR may be read-only), and checked to be whole zip files.
# - Two wheels of one package are refused: with --no-deps nothing would choose between them.
# - `pip install --no-index --no-deps --target`: exactly these files, nothing resolved or fetched. TARGET_DIR is
#   rebuilt whole each time, so a wheel dropped from the folder does not live on in it; for that reason a
#   non-empty TARGET_DIR that this script did not make is refused.
# - Prints the PYTHONPATH to export (with the folders that wheels' .pth files add), and writes it into
#   TARGET_DIR/.python-path. PYTHON (default python3) is the interpreter to install for.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
MARKER=".installed-by-install-offline-wheels"
# The path to put on PYTHONPATH, written into the target.
PATH_FILE=".python-path"
# Where split wheels are joined; removed on exit.
SCRATCH=""
# Reads every member, so a part missing from the middle is caught here rather than by pip half-way.
CHECK_ZIP='
import sys, zipfile
try:
    bad = zipfile.ZipFile(sys.argv[1]).testzip()
except (OSError, zipfile.BadZipFile) as error:
    sys.exit(str(error))
sys.exit(f"corrupt member {bad}" if bad else 0)
'

usage() {
    echo "usage: $0 WHEELS_DIR TARGET_DIR" >&2
    exit 2
}

fail() {
    echo "install-offline-wheels: $*" >&2
    exit 1
}

# The package a wheel file belongs to, normalized (PEP 503), from its name: NAME-VERSION[-BUILD]-PY-ABI-PLATFORM.whl.
package_of() {
    local file="${1##*/}"
    echo "${file%%-*}" | tr '[:upper:]' '[:lower:]' | tr -s '_.-' '_'
}

# Joins each NAME.whl.part-* group of $1 into $2/NAME.whl, unless NAME.whl itself is in $1.
join_parts() {
    local wheels_dir="$1" scratch="$2" first wheel
    for first in "$wheels_dir"/*.whl.part-aa; do
        [ -e "$first" ] || continue
        wheel="${first%.part-aa}"
        if [ -e "$wheel" ]; then
            echo "note: ${wheel##*/} is whole; its parts are ignored" >&2
            continue
        fi
        # The glob sorts the suffixes (aa, ab, ...) in the order split wrote them.
        cat "$wheel".part-* > "$scratch/${wheel##*/}"
        "$PYTHON" -c "$CHECK_ZIP" "$scratch/${wheel##*/}" || fail "the parts of ${wheel##*/} do not join into a whole wheel (one missing or cut short?)"
        echo "joined ${wheel##*/} from $(ls "$wheel".part-* | wc -l) parts" >&2
    done
    # A part group without its first part cannot be joined.
    for wheel in "$wheels_dir"/*.whl.part-*; do
        [ -e "$wheel" ] || continue
        [ -e "${wheel%.part-*}.part-aa" ] || fail "${wheel##*/}: the first part (.part-aa) is missing"
    done
}

# Refuses two wheels of one package among the arguments.
refuse_duplicates() {
    local -A seen=()
    local wheel package clashes=""
    for wheel in "$@"; do
        package="$(package_of "$wheel")"
        if [ -n "${seen[$package]:-}" ]; then
            clashes+="  ${seen[$package]##*/} and ${wheel##*/}"$'\n'
        else
            seen[$package]="$wheel"
        fi
    done
    [ -z "$clashes" ] || fail "two wheels of one package (remove the one not wanted):"$'\n'"$clashes"
}

main() {
    [ "$#" -eq 2 ] || usage
    local wheels_dir="$1" target="$2"
    [ -d "$wheels_dir" ] || fail "no such folder: $wheels_dir"
    if [ -e "$target" ] && [ ! -e "$target/$MARKER" ] && [ -n "$(ls -A "$target")" ]; then
        fail "$target is not empty and was not made by this script: choose a new folder"
    fi

    SCRATCH="$(mktemp -d)"
    trap 'rm -rf "$SCRATCH"' EXIT
    join_parts "$wheels_dir" "$SCRATCH"

    local wheels=() wheel
    for wheel in "$wheels_dir"/*.whl "$SCRATCH"/*.whl; do
        if [ -e "$wheel" ]; then wheels+=("$wheel"); fi
    done
    [ "${#wheels[@]}" -gt 0 ] || fail "no wheels in $wheels_dir"
    refuse_duplicates "${wheels[@]}"

    # Installed beside the target and swapped in, so a failed install leaves the previous one as it was.
    local staging="$target.installing"
    rm -rf "$staging"
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install -q --no-index --no-deps --target "$staging" "${wheels[@]}"
    touch "$staging/$MARKER"
    rm -rf "$target"
    mv "$staging" "$target"

    local site path line pth
    site="$(cd "$target" && pwd)"
    path="$site"
    # A folder on PYTHONPATH is not a site directory: Python reads no .pth file there, so the folders that wheels'
    # .pth files add (nvidia-cutlass-dsl's `cutlass`, for one) go on the path themselves.
    for pth in "$site"/*.pth; do
        [ -e "$pth" ] || continue
        while IFS= read -r line || [ -n "$line" ]; do
            case "$line" in "" | "#"* | import*) continue ;; esac
            if [ -d "$site/$line" ]; then path+=":$site/$line"; fi
        done < "$pth"
    done
    # Kept beside the wheels for whatever runs them (`make gpu-check` reads it).
    echo "$path" > "$site/$PATH_FILE"
    echo "installed ${#wheels[@]} wheels into $site; to use them:"
    echo "export PYTHONPATH=$path\${PYTHONPATH:+:\$PYTHONPATH}"
}

main "$@"
