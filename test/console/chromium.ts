/**
 * Debian's Chromium driven by playwright-core, for the browser tests (the console's, and the
 * cluster's OAuth flow across replicas): how it is launched, and how a test reads the page.
 */
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";

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

/**
 * Every visible box in `selector` (a card) that leaves it or the viewport, and the page's sideways
 * scroll: what a person would see cut off or have to scroll to.
 */
export const overflow = (page: Page, selector: string) =>
  inPage<{ out: string[]; scroll: number; width: number }>(
    page,
    `(() => {
      const card = document.querySelector(${JSON.stringify(selector)}).getBoundingClientRect();
      const width = document.documentElement.clientWidth;
      const out = [];
      for (const e of document.querySelectorAll(${JSON.stringify(selector)} + " *")) {
        const r = e.getBoundingClientRect();
        if (r.width === 0 && r.height === 0) continue;
        const name = e.tagName + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : "");
        if (r.left < card.left - 1 || r.right > card.right + 1)
          out.push(name + " leaves its card: " + Math.round(r.left) + ".." + Math.round(r.right) +
            " in " + Math.round(card.left) + ".." + Math.round(card.right));
        else if (r.right > width + 1) out.push(name + " leaves the viewport at " + Math.round(r.right));
      }
      return { out, scroll: document.documentElement.scrollWidth, width };
    })()`,
  );

/**
 * A new context at `width` × 800 (the clipboard granted, for the copy buttons), signed in to the
 * console at `url` as `user` through its form, on the keys view it opens with.
 */
export async function signIn(
  browser: Browser,
  url: string,
  user: { name: string; password: string },
  width = 1280,
): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width, height: 800 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: url });
  const page = await context.newPage();
  await page.goto(`${url}/console`);
  await page.fill("#name", user.name);
  await page.fill("#password", user.password);
  await Promise.all([page.waitForURL(/\/console$/), page.click("button[type=submit]")]);
  await page.waitForSelector("body[data-view=keys]");
  return { context, page };
}
