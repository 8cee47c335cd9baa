/**
 * Route templates in OpenAPI form (`/v1/accounts/{id}`, `/v1/tenants/{tenantId}:suspend`),
 * compiled once and matched against request paths. Shared by the core router and the edge
 * route table so both sides agree on which template a path belongs to.
 */

export interface CompiledTemplate {
  readonly template: string;
  readonly paramNames: readonly string[];
  /** Literal characters in the template: the more, the more specific. */
  readonly specificity: number;
  /** The anchored pattern `match` uses (RE2-compatible: literals escaped, `([^/]+?)` per parameter). */
  readonly source: string;
  /** The literal text before the first parameter: a path that does not start with it cannot match. */
  readonly prefix: string;
  match(path: string): Record<string, string> | undefined;
}

const paramPattern = /\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

function escapeRegex(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Compile a template; parameters match one non-empty path segment. */
export function compileTemplate(template: string): CompiledTemplate {
  const paramNames: string[] = [];
  let pattern = '';
  let last = 0;
  let literal = 0;
  for (const m of template.matchAll(paramPattern)) {
    const before = template.slice(last, m.index);
    pattern += escapeRegex(before);
    literal += before.length;
    pattern += '([^/]+?)';
    paramNames.push(m[1] as string);
    last = m.index + m[0].length;
  }
  const tail = template.slice(last);
  pattern += escapeRegex(tail);
  literal += tail.length;
  const regex = new RegExp(`^${pattern}$`);
  return {
    template,
    paramNames,
    specificity: literal,
    source: regex.source,
    prefix: template.split('{', 1)[0] as string,
    match(path: string) {
      const m = regex.exec(path);
      if (!m) return undefined;
      const params: Record<string, string> = {};
      for (let i = 0; i < paramNames.length; i++) {
        const raw = m[i + 1] as string;
        let value: string;
        try {
          value = decodeURIComponent(raw);
        } catch {
          return undefined;
        }
        params[paramNames[i] as string] = value;
      }
      return params;
    },
  };
}

export interface TemplateMatch<T> {
  entry: T;
  params: Record<string, string>;
}

/**
 * A set of templated entries keyed by method. `find` returns the most specific match, and
 * `allowedMethods` tells a 405 from a 404.
 */
export class TemplateTable<T> {
  private readonly entries: { method: string; compiled: CompiledTemplate; entry: T }[] = [];

  add(method: string, template: string, entry: T): void {
    const upper = method.toUpperCase();
    if (this.entries.some((e) => e.method === upper && e.compiled.template === template)) {
      throw new Error(`duplicate route ${upper} ${template}`);
    }
    this.entries.push({ method: upper, compiled: compileTemplate(template), entry });
    this.entries.sort((a, b) => b.compiled.specificity - a.compiled.specificity);
  }

  find(method: string, path: string): TemplateMatch<T> | undefined {
    const upper = method.toUpperCase();
    // Most templates are ruled out by their literal prefix, without running their pattern (a
    // route table of a few hundred patterns cost the edge about 10 µs per Check, issue 18).
    for (const e of this.entries) {
      if (e.method !== upper && !(upper === 'HEAD' && e.method === 'GET')) continue;
      if (!path.startsWith(e.compiled.prefix)) continue;
      const params = e.compiled.match(path);
      if (params) return { entry: e.entry, params };
    }
    return undefined;
  }

  /** Methods that have a template matching `path` (empty when the path is unknown). */
  allowedMethods(path: string): string[] {
    const out = new Set<string>();
    for (const e of this.entries)
      if (path.startsWith(e.compiled.prefix) && e.compiled.match(path)) out.add(e.method);
    return [...out];
  }

  /** The matched template for a path, used as a low-cardinality metrics label. */
  templateOf(method: string, path: string): string | undefined {
    const upper = method.toUpperCase();
    for (const e of this.entries) {
      if (e.method === upper && path.startsWith(e.compiled.prefix) && e.compiled.match(path))
        return e.compiled.template;
    }
    return undefined;
  }

  values(): { method: string; template: string; entry: T }[] {
    return this.entries.map((e) => ({ method: e.method, template: e.compiled.template, entry: e.entry }));
  }
}

/**
 * The error format of paths no route serves, by family (the first two segments, e.g.
 * `/scim/v2`): a family whose routes all answer in one format keeps it for its unknown paths
 * and methods (a SCIM client gets SCIM errors there too); other paths get `fallback`.
 */
export function familyFormats<F extends string>(
  routes: { template: string; format: F | undefined }[],
  fallback: F,
): (path: string) => F {
  const familyOf = (path: string) => path.split('/').slice(0, 3).join('/');
  const formats = new Map<string, Set<F>>();
  for (const r of routes) {
    const f = familyOf(r.template);
    const set = formats.get(f) ?? new Set<F>();
    set.add(r.format ?? fallback);
    formats.set(f, set);
  }
  return (path) => {
    const set = formats.get(familyOf(path));
    return set && set.size === 1 ? ([...set][0] as F) : fallback;
  };
}
