#!/usr/bin/env bash
# What only a real cluster can show, checked by hand against a deployment of this base:
#   1. the worker DaemonSet lands exactly on the nodes labelled scratchrun.dev/kvm=true;
#   2. /dev/kvm works inside a privileged worker pod (results say isolation microvm-kvm);
#   3. a call through the API Service runs, and its record names the worker;
#   4. a worker whose node goes NotReady drops out of the headless Service's DNS, and calls keep
#      working on the other workers (needs two KVM nodes; it cordons and drains one for a while).
# Usage: NAMESPACE=scratchrun SCRATCHRUN_API_KEY=srk_... bash verify-on-cluster.sh [--disrupt]
# It changes nothing unless --disrupt is given (then it drains one worker node and uncordons it).
set -euo pipefail
NS=${NAMESPACE:-scratchrun}
KEY=${SCRATCHRUN_API_KEY:?set SCRATCHRUN_API_KEY to a key from: kubectl -n $NS exec deploy/scratchrun-api -- scratchrun keys create --name verify}
say() { printf '\n==> %s\n' "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

say "1. DaemonSet placement: worker pods on labelled nodes only, one each"
labelled=$(kubectl get nodes -l scratchrun.dev/kvm=true -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | sort)
placed=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=worker -o jsonpath='{.items[*].spec.nodeName}' | tr ' ' '\n' | sort)
[ -n "$labelled" ] || fail "no node is labelled scratchrun.dev/kvm=true"
[ "$labelled" = "$placed" ] || fail "workers on [$placed], labelled nodes are [$labelled]"
echo "workers on: $placed"

say "2. /dev/kvm inside a worker pod"
pod=$(kubectl -n "$NS" get pods -l app.kubernetes.io/component=worker -o jsonpath='{.items[0].metadata.name}')
kubectl -n "$NS" exec "$pod" -- scratchrun doctor || fail "doctor reports a failed check in $pod"

say "3. A call through the API Service"
kubectl -n "$NS" port-forward svc/scratchrun-api 18787:80 >/dev/null 2>&1 &
pf=$!
trap 'kill $pf 2>/dev/null || true' EXIT
sleep 2
call() {
  curl -fsS -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d '{"runtime":"python3.12","code":"import platform; print(platform.node() or \"sandbox\")"}' \
    http://127.0.0.1:18787/v1/exec
}
out=$(call) || fail "the call failed"
echo "$out" | grep -q '"isolation":"microvm-kvm"' || fail "not microvm-kvm: $out"
echo "ok: $out"

if [ "${1:-}" = "--disrupt" ]; then
  say "4. A worker node leaves: DNS drops it, calls go on elsewhere"
  node=$(echo "$labelled" | head -1)
  [ "$(echo "$labelled" | wc -l)" -ge 2 ] || fail "--disrupt needs two KVM nodes"
  kubectl cordon "$node"
  kubectl -n "$NS" delete pod --field-selector "spec.nodeName=$node" -l app.kubernetes.io/component=worker --wait=false
  start=$(date +%s)
  for i in $(seq 1 20); do call >/dev/null || fail "call $i failed while $node left"; sleep 1; done
  echo "20 calls in $(( $(date +%s) - start )) s while $node's worker drained"
  kubectl uncordon "$node"
  echo "For NotReady timing, stop the kubelet on a worker node by hand and watch:"
  echo "  kubectl -n $NS get endpointslices -l kubernetes.io/service-name=scratchrun-workers -w"
fi
say "all checks passed"
