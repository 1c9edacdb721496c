import { SETTINGS, SETTING_NAMES, type Setting, type SettingName } from "./table.js";

/** The Default column: a value as code, words as they are. */
export function unsetText(s: Setting): string {
  if ("default" in s) return `\`${s.default}\``;
  if ("fallback" in s) return `\`${s.fallback}\``;
  return s.unset;
}

/** The What-it-does column: a tests-only variable says so first. */
function whatText(s: Setting): string {
  return s.readers.length === 1 && s.readers[0] === "tests" ? `tests only: ${s.doc}` : s.doc;
}

/**
 * The settings table of docs/CONFIGURATION.md (`<!-- generated:settings-table -->`), one row per variable
 * in the schema's order; a variable with `rowOf` shares that variable's row (its Default and
 * What-it-does).
 */
export function settingsTable(): string {
  const rows = SETTING_NAMES.filter((name) => !(SETTINGS[name] as Setting).rowOf).map((name) => {
    const s: Setting = SETTINGS[name];
    const names = [name, ...SETTING_NAMES.filter((n) => (SETTINGS[n] as Setting).rowOf === name)];
    return `| ${names.map((n: SettingName) => `\`${n}\``).join(", ")} | ${unsetText(s)} | ${whatText(s)} |`;
  });
  return ["| Variable | Default | What it does |", "|---|---|---|", ...rows].join("\n");
}
