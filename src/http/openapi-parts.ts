/**
 * The pieces the service's OpenAPI document is written with (api/openapi.ts, api/openapi-auth.ts;
 * console/openapi.ts may use them too): plain data, so the generated openapi/openapi.json is
 * what the paths spell out.
 */

/** JSON content of the schema `ref` names. */
export const json = (ref: string) => ({ "application/json": { schema: { $ref: ref } } });

/** An error answer: the service's Error body. */
export const err = (description: string) => ({
  description,
  content: json("#/components/schemas/Error"),
});

/** A required JSON request body of `schema` (a `$ref`, or the schema itself). */
export const jsonBody = (schema: Record<string, unknown>) => ({
  required: true,
  content: { "application/json": { schema } },
});

export const str = { type: "string" };
export const int = { type: "integer" };
export const nullable = (t: string) => ({ type: [t, "null"] });
