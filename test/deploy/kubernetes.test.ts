/**
 * The Kubernetes base renders with `kubectl kustomize` (offline), every object validates against
 * the Kubernetes API schemas (kubernetes-models: types and required fields by its validators,
 * unknown fields by TypeScript's excess-property check against the same models), and the objects
 * fit together: selectors match pods, the API finds the workers' headless Service, workers hold
 * no database credentials, the grace period outlasts the longest call, policies wall the workers.
 * What only a cluster can show (placement, NotReady timing, /dev/kvm in the pod) is
 * deploy/kubernetes/verify-on-cluster.sh, run by hand.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import ts from "typescript";
import { parseAllDocuments } from "yaml";
import { LIMITS } from "../../src/schema/limits.js";
import { skipOutsideCi } from "../helpers/ci.js";
import { REPO_ROOT } from "../helpers/mcp-client.js";

type Obj = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  spec?: Record<string, unknown>;
  [k: string]: unknown;
};

/** kind → the kubernetes-models module and interface that describe it. */
const MODELS: Record<string, { module: string; type: string }> = {
  "v1/Namespace": { module: "kubernetes-models/v1/Namespace", type: "INamespace" },
  "v1/ServiceAccount": { module: "kubernetes-models/v1/ServiceAccount", type: "IServiceAccount" },
  "v1/Service": { module: "kubernetes-models/v1/Service", type: "IService" },
  "apps/v1/Deployment": { module: "kubernetes-models/apps/v1/Deployment", type: "IDeployment" },
  "apps/v1/DaemonSet": { module: "kubernetes-models/apps/v1/DaemonSet", type: "IDaemonSet" },
  "policy/v1/PodDisruptionBudget": {
    module: "kubernetes-models/policy/v1/PodDisruptionBudget",
    type: "IPodDisruptionBudget",
  },
  "autoscaling/v2/HorizontalPodAutoscaler": {
    module: "kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler",
    type: "IHorizontalPodAutoscaler",
  },
  "networking.k8s.io/v1/NetworkPolicy": {
    module: "kubernetes-models/networking.k8s.io/v1/NetworkPolicy",
    type: "INetworkPolicy",
  },
};
const modelKey = (o: Obj) => `${o.apiVersion}/${o.kind}`;

const KUBECTL = spawnSync("kubectl", ["version", "--client"], { encoding: "utf8" });
const MISSING =
  KUBECTL.status === 0 ? null : "kubectl is not installed (apt-get install kubernetes-client)";

/** Renders the base; what kustomize prints, parsed. */
function render(dir = join(REPO_ROOT, "deploy/kubernetes")): Obj[] {
  const r = spawnSync("kubectl", ["kustomize", dir], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  return parseAllDocuments(r.stdout).map((d) => d.toJSON() as Obj);
}

/** Unknown or mistyped fields, found by type-checking each object as a literal of its model. */
function typeErrors(objects: Obj[]): string[] {
  const imports = new Set<string>();
  const lines: string[] = [];
  objects.forEach((o, i) => {
    const m = MODELS[modelKey(o)];
    if (!m) return;
    imports.add(`import type { ${m.type} } from "${m.module}";`);
    lines.push(`export const o${i}: ${m.type} = ${JSON.stringify(o, null, 1)};`);
  });
  const file = join(REPO_ROOT, "manifests-under-test.ts");
  const text = [...imports, ...lines].join("\n");
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    skipLibCheck: true,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, lang, ...rest) =>
    name === file ? ts.createSourceFile(name, text, lang) : getSourceFile(name, lang, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === file || fileExists(name);
  const program = ts.createProgram([file], options, host);
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file?.fileName === file || !d.file)
    .map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
}

/** Validation by the models' own (AJV) validators: types, enums, required fields. */
async function schemaErrors(objects: Obj[]): Promise<string[]> {
  const errors: string[] = [];
  for (const o of objects) {
    const m = MODELS[modelKey(o)];
    if (!m) {
      errors.push(`${modelKey(o)} has no model here`);
      continue;
    }
    const mod = (await import(m.module)) as Record<
      string,
      new (d: unknown) => { validate(): void }
    >;
    const Model = mod[o.kind]!;
    try {
      new Model(o).validate();
    } catch (e) {
      errors.push(`${o.kind}/${o.metadata.name}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  return errors;
}

const matches = (selector: Record<string, string>, labels: Record<string, string> = {}) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);

type Pod = {
  metadata: { labels: Record<string, string> };
  spec: {
    terminationGracePeriodSeconds?: number;
    nodeSelector?: Record<string, string>;
    containers: {
      args?: string[];
      env?: { name: string }[];
      ports?: { name: string; containerPort: number }[];
      securityContext?: { privileged?: boolean };
      readinessProbe?: { httpGet?: { path: string } };
      lifecycle?: { preStop?: { exec?: { command: string[] } } };
    }[];
  };
};

describe("Kubernetes base (deploy/kubernetes)", { skip: skipOutsideCi(MISSING) }, () => {
  let objects: Obj[];
  const find = (kind: string, name: string) => {
    const o = objects.find((x) => x.kind === kind && x.metadata.name === name);
    assert.ok(o, `${kind}/${name} is rendered`);
    return o;
  };
  const podOf = (o: Obj) => (o.spec as { template: Pod }).template;

  before(() => {
    objects = render();
  });

  test("renders with kubectl kustomize, every object in the scratchrun namespace", () => {
    const kinds = objects.map((o) => `${o.kind}/${o.metadata.name}`).sort();
    assert.deepEqual(kinds, [
      "DaemonSet/scratchrun-worker",
      "Deployment/scratchrun-api",
      "HorizontalPodAutoscaler/scratchrun-api",
      "Namespace/scratchrun",
      "NetworkPolicy/scratchrun-api",
      "NetworkPolicy/scratchrun-default-deny",
      "NetworkPolicy/scratchrun-worker",
      "PodDisruptionBudget/scratchrun-api",
      "Service/scratchrun-api",
      "Service/scratchrun-workers",
      "ServiceAccount/scratchrun-api",
      "ServiceAccount/scratchrun-worker",
    ]);
    for (const o of objects.filter((x) => x.kind !== "Namespace"))
      assert.equal(o.metadata.namespace, "scratchrun", `${o.kind}/${o.metadata.name}`);
  });

  test("every object validates against the Kubernetes schemas", async () => {
    assert.deepEqual(await schemaErrors(objects), []);
    // Control: the validators do reject a wrong type and a missing required field.
    const api = JSON.parse(JSON.stringify(find("Deployment", "scratchrun-api"))) as Obj;
    (api.spec as Record<string, unknown>).replicas = "two";
    delete (api.spec as Record<string, unknown>).selector;
    const errors = (await schemaErrors([api])).join("\n");
    assert.match(errors, /replicas must be integer/);
    assert.match(errors, /selector/);
  });

  test("no unknown or mistyped field (type-checked against the same models)", () => {
    assert.deepEqual(typeErrors(objects), []);
    // Control: a misspelt field and a wrong type are each caught, so the check above can fail.
    const broken = (edit: (spec: Record<string, unknown>) => void) => {
      const o = JSON.parse(JSON.stringify(find("DaemonSet", "scratchrun-worker"))) as Obj;
      edit(podOf(o).spec as Record<string, unknown>);
      return typeErrors([o]).join("\n");
    };
    assert.match(
      broken((s) => (s.terminationGracePeriodSecond = 60)),
      /terminationGracePeriodSecond/,
    );
    assert.match(
      broken((s) => (s.hostNetwork = "yes")),
      /'string' is not assignable to type 'boolean/,
    );
  });

  test("API: at least two replicas, a PDB and an HPA on calls in flight, all selecting its pods", () => {
    const api = find("Deployment", "scratchrun-api");
    const spec = api.spec as {
      replicas: number;
      selector: { matchLabels: Record<string, string> };
    };
    assert.ok(spec.replicas >= 2);
    const pod = podOf(api);
    assert.ok(matches(spec.selector.matchLabels, pod.metadata.labels));
    const pdb = find("PodDisruptionBudget", "scratchrun-api").spec as {
      minAvailable: number;
      selector: { matchLabels: Record<string, string> };
    };
    assert.ok(pdb.minAvailable >= 1);
    assert.ok(matches(pdb.selector.matchLabels, pod.metadata.labels));
    const hpa = find("HorizontalPodAutoscaler", "scratchrun-api").spec as {
      minReplicas: number;
      scaleTargetRef: { kind: string; name: string };
      metrics: { pods?: { metric: { name: string } } }[];
    };
    assert.ok(hpa.minReplicas >= 2);
    assert.deepEqual(hpa.scaleTargetRef, {
      apiVersion: "apps/v1",
      kind: "Deployment",
      name: "scratchrun-api",
    });
    assert.equal(hpa.metrics[0]?.pods?.metric.name, "scratchrun_calls_in_flight");
    const service = find("Service", "scratchrun-api").spec as { selector: Record<string, string> };
    assert.ok(matches(service.selector, pod.metadata.labels));
  });

  test("workers: DaemonSet on KVM nodes, privileged, a drain before SIGTERM, grace past the longest call", () => {
    const ds = find("DaemonSet", "scratchrun-worker");
    const pod = podOf(ds);
    const c = pod.spec.containers[0]!;
    assert.deepEqual(pod.spec.nodeSelector, { "scratchrun.dev/kvm": "true" });
    assert.equal(c.securityContext?.privileged, true);
    assert.ok(
      (pod.spec.terminationGracePeriodSeconds ?? 30) >= LIMITS.timeoutMs.max / 1000 + 15,
      "the grace period outlasts the longest call plus the drain",
    );
    assert.match(c.lifecycle?.preStop?.exec?.command.join(" ") ?? "", /kill -TERM 1/);
    assert.equal(c.readinessProbe?.httpGet?.path, "/readyz");
    assert.deepEqual(c.args?.slice(0, 3), ["serve", "--role", "worker"]);
    const names = (c.env ?? []).map((e) => e.name);
    assert.ok(!names.includes("SCRATCHRUN_DATABASE_URL"), "workers hold no database credentials");
    assert.ok(names.includes("SCRATCHRUN_WORKER_TOKEN"));
  });

  test("the API finds the workers through their headless Service", () => {
    const svc = find("Service", "scratchrun-workers").spec as {
      clusterIP: string;
      publishNotReadyAddresses: boolean;
      selector: Record<string, string>;
      ports: { port: number; targetPort: string }[];
    };
    assert.equal(svc.clusterIP, "None");
    assert.equal(svc.publishNotReadyAddresses, false);
    const worker = podOf(find("DaemonSet", "scratchrun-worker"));
    assert.ok(matches(svc.selector, worker.metadata.labels));
    const port = worker.spec.containers[0]!.ports!.find((p) => p.name === svc.ports[0]!.targetPort);
    assert.ok(port, "the Service's target port is the worker's port");
    const args = podOf(find("Deployment", "scratchrun-api")).spec.containers[0]!.args!;
    const workers = args[args.indexOf("--workers") + 1];
    assert.equal(workers, `scratchrun-workers.scratchrun.svc.cluster.local:${svc.ports[0]!.port}`);
  });

  test("network policies: default deny, workers accept only the API, sandbox egress never reaches private ranges", () => {
    const deny = find("NetworkPolicy", "scratchrun-default-deny").spec as {
      podSelector: object;
      policyTypes: string[];
    };
    assert.deepEqual(deny.podSelector, {});
    assert.deepEqual(deny.policyTypes.sort(), ["Egress", "Ingress"]);
    const w = find("NetworkPolicy", "scratchrun-worker").spec as {
      podSelector: { matchLabels: Record<string, string> };
      ingress: {
        from: { podSelector: { matchLabels: Record<string, string> } }[];
        ports: { port: number }[];
      }[];
      egress: { to: { ipBlock: { cidr: string; except: string[] } }[] }[];
    };
    const workerPod = podOf(find("DaemonSet", "scratchrun-worker"));
    const apiPod = podOf(find("Deployment", "scratchrun-api"));
    assert.ok(matches(w.podSelector.matchLabels, workerPod.metadata.labels));
    assert.equal(w.ingress.length, 1);
    assert.equal(w.ingress[0]!.from.length, 1);
    assert.ok(matches(w.ingress[0]!.from[0]!.podSelector.matchLabels, apiPod.metadata.labels));
    assert.ok(!matches(w.ingress[0]!.from[0]!.podSelector.matchLabels, workerPod.metadata.labels));
    assert.deepEqual(
      w.ingress[0]!.ports.map((p) => p.port),
      [8788],
    );
    const v4 = w.egress.flatMap((e) => e.to).find((t) => t.ipBlock.cidr === "0.0.0.0/0")!;
    for (const range of [
      "10.0.0.0/8",
      "172.16.0.0/12",
      "192.168.0.0/16",
      "100.64.0.0/10",
      "169.254.0.0/16",
    ])
      assert.ok(v4.ipBlock.except.includes(range), range);
  });
});
