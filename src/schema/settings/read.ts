import { SETTINGS, type Setting, type SettingName } from "./table.js";

export { SETTINGS, SETTING_NAMES, type SettingName } from "./table.js";

/** An environment to read from: `process.env`, or one a command line laid its flags over. */
export type Env = Readonly<Record<string, string | undefined>>;

type Entry<N extends SettingName> = (typeof SETTINGS)[N];

/** The flags: read with `settingOn`. */
export type FlagName = {
  [N in SettingName]: Entry<N> extends { kind: "flag" } ? N : never;
}[SettingName];

/** A setting's raw value: always a string when the schema gives it a default. */
export type Raw<N extends SettingName> =
  Entry<N> extends { default: string } ? string : string | undefined;

/**
 * The variable's raw value as the environment has it (an empty string stays empty), or the
 * schema's default when it is unset. Parsing and its errors stay with the reader.
 */
export function setting<N extends Exclude<SettingName, FlagName>>(name: N, env: Env): Raw<N> {
  const s: Setting = SETTINGS[name];
  const raw = env[name];
  return (raw === undefined && "default" in s ? s.default : raw) as Raw<N>;
}

/** A flag: on when it has its `on` value, or unless it has its `off` value. */
export function settingOn(name: FlagName, env: Env): boolean {
  const s: Setting = SETTINGS[name];
  if (s.kind !== "flag") throw new TypeError(`${name} is not a flag`);
  return "on" in s ? env[name] === s.on : env[name] !== s.off;
}
