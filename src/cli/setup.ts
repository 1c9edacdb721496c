import { spawn } from "node:child_process";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { withImageConfig } from "../images/config-load.js";
import { PACKAGE_ROOT } from "../images/paths.js";

/**
 * `scratchrun setup` / `npx -y scratchrun-mcp setup`: runs scripts/setup.sh (apt packages,
 * the guest agent, the runtime image, the microVM guest; idempotent), its progress on stderr.
 */
export function runSetup(argv: string[], root: string = PACKAGE_ROOT): Promise<number> {
  let flag: string | undefined;
  try {
    flag = parseArgs({ args: argv, options: { "image-config": { type: "string" } }, strict: true })
      .values["image-config"];
  } catch {
    process.stderr.write(
      `scratchrun setup: takes only --image-config PATH (got ${argv.join(" ")})\n`,
    );
    return Promise.resolve(2);
  }
  return new Promise((resolve) => {
    const child = spawn("bash", [join(root, "scripts", "setup.sh")], {
      cwd: root,
      env: withImageConfig(process.env, flag),
      stdio: ["ignore", process.stderr, process.stderr],
    });
    child.once("error", (e) => {
      process.stderr.write(`scratchrun setup: cannot run bash: ${e.message}\n`);
      resolve(1);
    });
    child.once("exit", (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}
