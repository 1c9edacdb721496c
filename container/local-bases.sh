#!/usr/bin/env bash
# Makes the two base images container/Containerfile names, for a host that reaches no container
# registry (only Debian's archive): a Debian bookworm rootfs from mmdebstrap with this host's
# Node.js 20 (npm and its headers too), and this host's CPython 3.12 prefix at /usr/local.
#   bash container/local-bases.sh            # prints the --build-arg flags to pass to podman build
# Needs root, mmdebstrap and podman; Node.js 20 on PATH; CPython 3.12 at $SCRATCHRUN_PYTHON312 or
# `pyenv prefix 3.12.1`.
set -euo pipefail
exec 3>&1 1>&2

node_bin=$(readlink -f "$(command -v node)")
case "$("$node_bin" --version)" in v20.*) ;; *) echo "local-bases: $node_bin is not Node.js 20" >&2; exit 1 ;; esac
node_root=$(dirname "$(dirname "$node_bin")")          # /usr for /usr/bin/node
py=${SCRATCHRUN_PYTHON312:-$(pyenv prefix 3.12.1)}
[ -x "$py/bin/python3.12" ] || { echo "local-bases: no CPython 3.12 at $py" >&2; exit 1; }

node_tag=localhost/scratchrun-base-node20:bookworm
py_tag=localhost/scratchrun-base-python312:bookworm

mmdebstrap --variant=minbase --include=ca-certificates bookworm - \
  --customize-hook="copy-in $node_bin /usr/local/bin" \
  --customize-hook="mkdir -p \"\$1/usr/local/lib/node_modules\" \"\$1/usr/local/include\"" \
  --customize-hook="copy-in $node_root/lib/node_modules/npm /usr/local/lib/node_modules" \
  --customize-hook="copy-in $node_root/include/node /usr/local/include" \
  --customize-hook='ln -s ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"' \
  --customize-hook='ln -s ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"' \
  | podman import --change 'CMD ["node"]' - "$node_tag"

tar -C "$py" --transform 's,^\.,usr/local,' -cf - . | podman import - "$py_tag"

echo "--build-arg NODE_IMAGE=$node_tag --build-arg PYTHON312_IMAGE=$py_tag" >&3
