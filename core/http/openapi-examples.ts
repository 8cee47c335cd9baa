/**
 * Examples in the OpenAPI document that work against the development stack (issue 15 item 3):
 * where a parameter or body property is named like a value the demo seed created (`tenantId`,
 * `agent_id`, `phone`, ...), its example is that value, so "Try it out" starts from the demo
 * tenant instead of a string generated from the schema's pattern (which the edge answers with a
 * misleading `denied: tenant_active`). The values come from the composition root (the seed's
 * output in development); a production core is given none.
 */

type Json = Record<string, unknown>;

/** Property or parameter name → example value. */
export type DocExamples = Readonly<Record<string, unknown>>;

/** Set `example` on a schema that has none, when its name has a value. */
function exampleFor(name: string, schema: Json, examples: DocExamples): void {
  if (!Object.hasOwn(examples, name) || schema.example !== undefined || schema.examples !== undefined) return;
  const value = examples[name];
  const type = schema.type;
  // Only a value the schema can hold: a string for a string, etc. (a mismatched example is worse than none).
  if (type !== undefined && type !== (Array.isArray(value) ? 'array' : typeof value)) return;
  schema.example = value;
}

/** Walk an object schema's properties (and those of `allOf`/`anyOf` members and array items). */
export function withExamples(schema: Json, examples: DocExamples): Json {
  const props = schema.properties;
  if (props && typeof props === 'object') {
    for (const [name, prop] of Object.entries(props as Record<string, Json>)) {
      exampleFor(name, prop, examples);
      withExamples(prop, examples);
    }
  }
  for (const key of ['allOf', 'anyOf', 'oneOf'] as const) {
    const members = schema[key];
    if (Array.isArray(members)) for (const m of members as Json[]) withExamples(m, examples);
  }
  const items = schema.items;
  if (items && typeof items === 'object' && !Array.isArray(items)) withExamples(items as Json, examples);
  return schema;
}

/** A parameter's example, on the parameter itself (what Swagger UI pre-fills). */
export function parameterExample(name: string, schema: Json, examples: DocExamples): unknown {
  const probe: Json = { ...schema };
  exampleFor(name, probe, examples);
  return probe.example;
}
