#!/usr/bin/env bash
# Installs and builds everything ScratchRun needs on a Debian 12 host, idempotently:
#   1. Debian packages (bubblewrap, QEMU, kernel, mmdebstrap, nftables, ...), only if missing
#   2. npm dependencies (npm ci; and test/node-legs: Node 22/24, the conformance suite) [source checkout only]
#   3. the TypeScript build (tsc) [source checkout only] and the static guest agent
#   4. the runtime image (Debian rootfs with python3.12, python3.11, node20, bash, and what the
#      image config SCRATCHRUN_IMAGE_CONFIG adds: `scratchrun setup --image-config PATH`), cached by recipe
#   5. the microVM guest (kernel, initramfs, root disk), cached
#   6. the microVM snapshot templates the server's pools start from (scratchrun templates), kept
#   7. the local service (scratchrun service install): a world-readable copy in
#      $SCRATCHRUN_PREFIX/lib/scratchrun (default /usr/local), scratchrun and scratchrun-mcp on
#      every user's PATH, the group scratchrun (with the user who ran this through sudo), and the
#      systemd unit, enabled and started where systemd runs (elsewhere: scratchrun daemon)
# Run as root. Progress is printed for each step; the image build shows mmdebstrap's own output.
# In a package npm installed (no tsconfig.json: `npx -y scratchrun-mcp setup` or
# `scratchrun setup` run this), npm has installed the dependencies and dist/ is prebuilt.
set -euo pipefail
exec 1>&2  # stdout stays clean: `npm start` hands it to the MCP server for JSON-RPC
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
  echo "setup: run as root (apt, cgroups and the image build need it): sudo $0" >&2
  exit 1
fi

# ripgrep and socat: the benchmark's sandbox-runtime peer refuses to start without them.
APT_PACKAGES=(bubblewrap qemu-system-x86 linux-image-cloud-amd64 busybox-static mmdebstrap
  nftables iproute2 erofs-utils squashfs-tools cpio util-linux gcc libc6-dev ripgrep socat)
# A source checkout also runs the tests: postgresql (the store and cluster tests start servers of
# their own, initdb in a temp dir) and kubectl (Debian's kubernetes-client, unless one is
# installed; renders deploy/kubernetes in a test), and chromium (the console's browser tests and
# the MCP Apps result view's, test/mcp/view.test.ts, drive it with playwright-core, which
# downloads no browser). An installed package needs none of them.
if [ -f tsconfig.json ]; then
  APT_PACKAGES+=(postgresql chromium)
  command -v kubectl >/dev/null || APT_PACKAGES+=(kubernetes-client)
fi
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  step "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  step "Debian packages: all present"
fi

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  echo "setup: Node.js 20 or newer is required (found ${node_major}); install it first" >&2
  exit 1
fi

checkout=0
[ -f tsconfig.json ] && checkout=1

if [ "$checkout" = 1 ]; then
  if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    step "npm ci"
    npm ci --no-audit --no-fund
  else
    step "npm dependencies: up to date"
  fi
  # The test legs on Node 22 and 24 LTS and the MCP conformance suite (needs Node 22+): a package
  # of its own, as each Node binary declares a `node` bin that would shadow the host's (0014).
  if [ ! -d test/node-legs/node_modules ] ||
    [ test/node-legs/package-lock.json -nt test/node-legs/node_modules/.package-lock.json ]; then
    step "npm ci --prefix test/node-legs (Node 22 and 24 for the test legs, the conformance suite)"
    npm ci --prefix test/node-legs --no-audit --no-fund
  else
    step "test legs' npm dependencies: up to date"
  fi
  step "npm run build (TypeScript + guest agent)"
  npm run build --silent
else
  step "guest agent (static C; rebuilt only when its sources change)"
  node scripts/build-guest.mjs
fi

step "runtime image (cached; rebuilt only when its recipe changes)"
node scripts/build-images.mjs

step "microVM guest: kernel, initramfs, root disk (cached)"
node scripts/build-vm.mjs >/dev/null

# The server's first start then clones its pools' templates instead of cold-booting each
# runtime's first call (~2.5 s under TCG). Not fatal: without them the server makes each itself.
step "microVM snapshot templates (kept; made again only when what they are made from changes)"
node dist/src/bin/scratchrun.js templates ||
  echo "setup: the templates were not made (above); the server makes each when it needs it" >&2

# Every user of this machine runs ScratchRun through one service (decision 0018).
step "local service: a world-readable install, scratchrun and scratchrun-mcp on PATH, the group scratchrun"
node dist/src/bin/scratchrun.js service install

if [ "$checkout" = 1 ]; then
  step "ready: start the stdio MCP server with: npx --no-install scratchrun-mcp (or scratchrun-mcp, for any user in the group scratchrun)"
else
  step "ready: an MCP client starts ScratchRun with: npx -y scratchrun-mcp (any user in the group scratchrun, through the local service; scratchrun doctor checks it)"
fi
