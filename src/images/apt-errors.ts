import { debianIncludes, type ImageConfig } from "./config.js";

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** apt's error line about `name`, without its "E: " prefix. */
function aptLine(text: string, name: string): string {
  const line = text.split("\n").find((l) => /\bE: /.test(l) && l.includes(name));
  return (line ?? "").replace(/^.*?E: /, "").trim();
}

/**
 * mmdebstrap's failure, as one line naming the config entry apt choked on: a package bookworm
 * does not have, or a version of it that it does not have. Anything else: the whole output.
 */
export function explainAptFailure(text: string, config: ImageConfig): string {
  const entries = [
    ...config.debian.map((p, i) => ({ p, at: `debian[${i}]` })),
    ...config.python311.map((p, i) => ({ p, at: `python3.11[${i}]` })),
  ];
  for (const { p, at } of entries) {
    const name = escape(p.name);
    if (
      p.version &&
      new RegExp(`Version '${escape(p.version)}' for '${name}' was not found`).test(text)
    )
      return `${at}: bookworm has no version ${p.version} of ${p.name} (apt: ${aptLine(text, p.name)}); nothing was changed, the previous image stays in use`;
    if (
      new RegExp(
        `Unable to locate package ${name}(\\s|$)|Package '?${name}'? has no installation candidate`,
        "m",
      ).test(text)
    )
      return `${at}: bookworm has no Debian package ${JSON.stringify(p.name)} (apt: ${aptLine(text, p.name)}); nothing was changed, the previous image stays in use`;
  }
  return `installing the Debian packages failed (the image config adds ${debianIncludes(config).join(", ")}); nothing was changed, the previous image stays in use:\n${text}`;
}
