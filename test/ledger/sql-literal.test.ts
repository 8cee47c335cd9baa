/** The batcher's SQL literals read back as the text they were made from, as pg's escapeLiteral's do. */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import pg from 'pg';
import { sqlLiteral } from '../../shared/db/literal.ts';

describe('sqlLiteral', () => {
  it("writes what pg's escapeLiteral writes, for quotes, backslashes and random text", () => {
    const cases = ["a'b", 'a\\b', "x\\'y", '', "''", '\\\\', JSON.stringify({ k: 'he said "hi" \\ \n \'' })];
    for (let i = 0; i < 500; i++) cases.push(randomBytes(24).toString('latin1'));
    for (const s of cases) assert.equal(sqlLiteral(s), pg.escapeLiteral(s), JSON.stringify(s));
  });
});
