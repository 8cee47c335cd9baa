/**
 * The lengths of the JSON texts this process parses (JSON.parse) while `run` runs (what it throws
 * goes up). Tests of "refused before it is parsed" run the refusal's assertion through it.
 */
export async function parsedTexts(run: () => unknown): Promise<number[]> {
  const parse = JSON.parse;
  const lengths: number[] = [];
  JSON.parse = (text: string, reviver?: Parameters<typeof JSON.parse>[1]) => {
    lengths.push(String(text).length);
    return parse(text, reviver);
  };
  try {
    await run();
  } finally {
    JSON.parse = parse;
  }
  return lengths;
}
