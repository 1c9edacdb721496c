#!/bin/sh
# The container's start: setup (idempotent; the first start builds the runtime image and the
# microVM guest into /var/cache/scratchrun, later starts find them), then the HTTP service on all
# interfaces of the container. Arguments go to `scratchrun serve` (e.g. --max-concurrent 8).
set -eu
scratchrun setup
exec scratchrun serve --host "${SCRATCHRUN_HOST:-0.0.0.0}" --port "${SCRATCHRUN_PORT:-8787}" "$@"
