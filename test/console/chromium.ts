/**
 * Debian's Chromium driven by playwright-core, for the browser tests (the console's, and the
 * cluster's OAuth flow across replicas): how it is launched, and how a test reads the page.
 */
import { chromium, type Browser, type Page } from "playwright-core";

/**
 * Chromium refuses to start as root with its sandbox on (it needs an unprivileged user for its
 * namespaces); the test machine runs tests as root, so only then is --no-sandbox passed. The pages
 * under test are this project's own servers', on loopback or the cluster harness's own address.
 */
export function launchArgs(): string[] {
  return process.getuid?.() === 0 ? ["--no-sandbox"] : [];
}

/** Debian's chromium, by its explicit path (playwright-core downloads no browser). */
export const launchChromium = (): Promise<Browser> =>
  chromium.launch({ executablePath: "/usr/bin/chromium", args: launchArgs() });

/** Runs `js` (an expression) in the page: the test compiles without the DOM's types. */
export const inPage = <T>(page: Page, js: string) => page.evaluate(js) as Promise<T>;

/** Waits until `js` is true in the page (waitForFunction would eval, which the CSP forbids). */
export async function until(page: Page, js: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await inPage<boolean>(page, js))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${js}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
