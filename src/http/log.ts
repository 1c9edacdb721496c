import { pino, type DestinationStream, type Logger as PinoLogger } from "pino";
import { DEFAULT_SETTINGS } from "../schema/settings/values.js";

export type Logger = Pick<PinoLogger, "info" | "warn" | "error">;

/**
 * Structured JSON logs on stderr (stdout stays free). What is logged is chosen field by field at
 * each call site: ids, runtimes, statuses, timings; never keys, headers, code, env or output.
 * `redact` is a second line of defence in case a header object is ever passed.
 */
export function createLogger(
  level = DEFAULT_SETTINGS.logLevel,
  destination: DestinationStream = pino.destination(2),
): Logger {
  return pino(
    {
      level,
      base: { service: "scratchrun" },
      redact: {
        paths: ["authorization", "*.authorization", "headers", "*.headers", "key", "env", "code"],
        censor: "[redacted]",
      },
    },
    destination,
  );
}
