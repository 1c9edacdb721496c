import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";

/**
 * An Ajv (draft-07, the MCP registry's and MCPB's schema dialect) that checks the formats these
 * schemas use, so a malformed URL fails as the registry would fail it.
 */
export function compileSchema(schema: object): ValidateFunction {
  const ajv = new Ajv({ strict: false, allErrors: true });
  ajv.addFormat("uri", (s: string) => {
    try {
      return new URL(s).protocol.length > 1;
    } catch {
      return false;
    }
  });
  ajv.addFormat("email", /^[^@\s]+@[^@\s]+\.[^@\s]+$/);
  return ajv.compile(schema);
}

export function errorsOf(validate: ValidateFunction): string {
  return (validate.errors ?? [])
    .map((e: ErrorObject) => `${e.instancePath || "/"} ${e.message ?? ""}`)
    .join("; ");
}
