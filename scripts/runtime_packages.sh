#!/usr/bin/env bash
# Prints the Debian packages that provide the shared libraries the given
# executables load (one per line, sorted): what a runtime image installs
# instead of the build's -dev packages. Used by the Dockerfile's build stage.
# Usage: scripts/runtime_packages.sh BINARY...
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: $0 BINARY..." >&2
  exit 2
fi
for bin in "$@"; do
  # "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)"
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  real="$(readlink -f "$lib")"
  # dpkg knows the path the package installed: try the link, then its target,
  # then the /usr-merged twin of each.
  for path in "$lib" "$real" "/usr$lib" "/usr$real" "${lib#/usr}" "${real#/usr}"; do
    if pkg="$(dpkg -S "$path" 2>/dev/null)"; then
      echo "${pkg%%:*}"
      break
    fi
  done
done | sort -u
