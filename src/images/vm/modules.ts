/** Which kernel modules go into the initramfs, in load order. Pure over modules.dep text. */

/** Parses `modules.dep` into module path → dependency paths. */
export function parseModulesDep(text: string): Map<string, string[]> {
  const deps = new Map<string, string[]>();
  for (const line of text.split("\n")) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const path = line.slice(0, colon).trim();
    const rest = line.slice(colon + 1).trim();
    deps.set(path, rest === "" ? [] : rest.split(/\s+/));
  }
  return deps;
}

/** "kernel/drivers/virtio/virtio_mmio.ko" → "virtio_mmio" (dashes and underscores are equal). */
export function moduleName(path: string): string {
  const base = path.slice(path.lastIndexOf("/") + 1);
  return base.replace(/\.ko(\.(xz|zst|gz))?$/, "").replace(/-/g, "_");
}

/**
 * Returns the module paths to insert, dependencies first, each once. Throws naming a module the
 * kernel does not have (it may be built in: then leave it out of the list).
 */
export function resolveModuleOrder(depText: string, wanted: readonly string[]): string[] {
  const deps = parseModulesDep(depText);
  const byName = new Map<string, string>();
  for (const path of deps.keys()) byName.set(moduleName(path), path);
  const order: string[] = [];
  const visiting = new Set<string>();
  const visit = (path: string) => {
    if (order.includes(path)) return;
    if (visiting.has(path)) throw new Error(`module dependency cycle at ${path}`);
    visiting.add(path);
    for (const d of deps.get(path) ?? []) visit(d);
    visiting.delete(path);
    order.push(path);
  };
  for (const name of wanted) {
    const path = byName.get(name.replace(/-/g, "_"));
    if (!path) throw new Error(`kernel module ${name} not found in modules.dep`);
    visit(path);
  }
  return order;
}
