/**
 * The route table's matching (shared/path-template.ts): a template is skipped when the path does
 * not start with its literal prefix (issue 18: the edge ran every template's pattern per Check),
 * and that skip never changes which template a path matches.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compileTemplate, TemplateTable } from '../../shared/path-template.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { Rand } from '../helpers/rand.ts';

/** The most specific template whose pattern matches, found without the prefix skip. */
function byPatternAlone(method: string, path: string, headAsGet = true): string | undefined {
  const upper = method.toUpperCase();
  const all = routeDeclarations
    .filter((r) => r.method === upper || (headAsGet && upper === 'HEAD' && r.method === 'GET'))
    .map((r) => compileTemplate(r.template))
    .filter((c) => c.match(path) !== undefined)
    .sort((a, b) => b.specificity - a.specificity);
  return all[0]?.template;
}

describe('route templates', () => {
  const table = new TemplateTable<string>();
  for (const r of routeDeclarations) table.add(r.method, r.template, r.template);

  it('a template’s prefix is its literal text before the first parameter', () => {
    assert.equal(compileTemplate('/v1/accounts/{id}/statement').prefix, '/v1/accounts/');
    assert.equal(compileTemplate('/v1/tenants/{tenantId}:suspend').prefix, '/v1/tenants/');
    assert.equal(compileTemplate('/v1/transfers').prefix, '/v1/transfers');
    assert.equal(compileTemplate('/{a}').prefix, '/');
  });

  it('matches every declared route and every near miss as the patterns alone do', () => {
    const rand = new Rand(20261124);
    const values = [
      '3f0b6c1e-1111-2222-3333-444455556666',
      'x',
      'a%2Fb',
      '%E2%82%AC',
      'v1',
      'accounts',
      '{id}',
    ];
    let matched = 0;
    for (const r of routeDeclarations) {
      const path = r.template.replace(/\{[A-Za-z_][A-Za-z0-9_]*\}/g, () => rand.pick(values));
      const variants = [path, `${path}/`, path.slice(0, -1), `${path}x`, path.toUpperCase(), `/x${path}`];
      for (const p of variants)
        for (const m of [r.method, 'HEAD', 'DELETE']) {
          const found = table.find(m, p);
          assert.equal(found?.entry, byPatternAlone(m, p), `${m} ${p}`);
          if (found) matched++;
          assert.equal(table.templateOf(m, p), byPatternAlone(m, p, false), `template of ${m} ${p}`);
        }
      assert.ok(table.allowedMethods(path).includes(r.method), `${r.method} ${path} is allowed`);
    }
    assert.ok(matched >= routeDeclarations.length, 'every declared route matched its own path');
  });

  it('skips by prefix without changing a match when the literal text holds regex metacharacters or a `{` that is no parameter', () => {
    const t = new TemplateTable<string>();
    for (const tpl of [
      '/v1/a.b/{id}',
      '/v1/a{1}b/{id}',
      '/v1/(x)+$/{id}:suspend',
      '/v1/{9}/{id}',
      '/v1/[q]*/{id}',
    ])
      t.add('POST', tpl, tpl);
    const cases: [string, string | undefined][] = [
      ['/v1/a.b/z', '/v1/a.b/{id}'],
      ['/v1/aXb/z', undefined],
      ['/v1/a{1}b/z', '/v1/a{1}b/{id}'],
      ['/v1/ab/z', undefined],
      ['/v1/(x)+$/z:suspend', '/v1/(x)+$/{id}:suspend'],
      ['/v1/xx$/z:suspend', undefined],
      ['/v1/(x)+$/z', undefined],
      ['/v1/{9}/z', '/v1/{9}/{id}'],
      ['/v1/9/z', undefined],
      ['/v1/[q]*/z', '/v1/[q]*/{id}'],
      ['/v1/q/z', undefined],
    ];
    for (const [path, want] of cases) {
      assert.equal(t.find('POST', path)?.entry, want, path);
      assert.deepEqual(t.allowedMethods(path), want ? ['POST'] : [], path);
      for (const v of t.values())
        assert.equal(
          v.template === want,
          compileTemplate(v.template).match(path) !== undefined,
          `${v.template} by its pattern alone against ${path}`,
        );
    }
  });

  it('keeps decoding parameters and refusing undecodable ones', () => {
    const t = new TemplateTable<string>();
    t.add('GET', '/v1/things/{id}', 'thing');
    assert.deepEqual(t.find('GET', '/v1/things/a%20b')?.params, { id: 'a b' });
    assert.equal(t.find('GET', '/v1/things/%E2%82'), undefined);
    assert.equal(t.find('GET', '/v1/thing/x'), undefined);
    assert.equal(t.find('GET', '/v1/things/'), undefined);
  });
});
